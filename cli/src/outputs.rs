//! The files a run writes, refused before step 1 where they name a file the command line reads
//! and the `Trainer` cannot see: the held-out files a run leaves unread, and `--init-params`.
//! (The `Trainer` itself refuses outputs over the data it reads and over checkpoints.)

use std::path::{Path, PathBuf};

use overlap_runtime::idx::{IdxDataset, Split};
use overlap_runtime::token_shards::locate;
use overlap_runtime::{Error, Result};

use crate::args::TrainArgs;

/// Refuses every output the flags name over a file they read that the `Trainer` does not.
pub(crate) fn refuse_outputs_over_inputs(args: &TrainArgs) -> Result<()> {
    refuse_outputs_over_held_out(args)?;
    refuse_outputs_over_init_params(args)
}

/// The files the run writes besides its checkpoints, with their flags.
fn outputs(args: &TrainArgs) -> impl Iterator<Item = (&Path, &'static str)> {
    [
        (&args.save_params, "--save-params"),
        (&args.trace, "--trace"),
        (&args.timeline, "--timeline"),
        (&args.write_profile, "--write-profile"),
    ]
    .into_iter()
    .filter_map(|(path, flag)| path.as_deref().map(|p| (p, flag)))
}

/// Refuses outputs written over the held-out files of `--data` or `--tokens` when the run does not
/// read them (`--eval-every 0`): the `Trainer` protects the files a run reads, and these are data
/// a later run validates on. (A text's held-out part is in the file the run reads.)
fn refuse_outputs_over_held_out(args: &TrainArgs) -> Result<()> {
    if args.validation_every().is_some() {
        return Ok(());
    }
    let (held_out, source) = match (&args.data, &args.tokens) {
        (Some(dir), _) => (IdxDataset::split_files(dir, Split::Test), format!("--data {}", dir.display())),
        (_, Some(path)) => {
            (locate(path).map(|(_, val)| val).unwrap_or_default(), format!("--tokens {}", path.display()))
        }
        _ => return Ok(()),
    };
    let held_out: Vec<PathBuf> = held_out.iter().filter_map(|p| p.canonicalize().ok()).collect();
    for (path, flag) in outputs(args) {
        if path.canonicalize().is_ok_and(|resolved| held_out.contains(&resolved)) {
            return Err(Error::Config(format!(
                "{flag} {} is a held-out file of {source} (read with --eval-every): the run would write over it; \
                 give another file",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Refuses a trace, a timeline or a profile written over the `--init-params` file: the run's
/// starting parameters would be lost. `--save-params` may replace it (the run read it first, and
/// the new file replaces it whole): a run that goes on from its own parameters.
fn refuse_outputs_over_init_params(args: &TrainArgs) -> Result<()> {
    let Some(start) = args.init_params.as_deref().and_then(|p| p.canonicalize().ok()) else { return Ok(()) };
    let over = outputs(args)
        .filter(|(_, flag)| *flag != "--save-params")
        .find(|(path, _)| path.canonicalize().is_ok_and(|resolved| resolved == start));
    match over {
        Some((path, flag)) => Err(Error::Config(format!(
            "{flag} {} is the --init-params file: the run would write over the parameters it starts from; give \
             another file",
            path.display()
        ))),
        None => Ok(()),
    }
}
