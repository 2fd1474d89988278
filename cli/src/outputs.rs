//! The files a run writes, refused before step 1 where they name a file the command line reads
//! and the `Trainer` cannot see: the held-out files a run leaves unread, `--init-params`, and what
//! `--sample` reads (`--tokenizer`, `--start FILE:path`).
//! (The `Trainer` itself refuses outputs over the data it reads and over checkpoints.)

use std::path::{Path, PathBuf};

use overlap_runtime::idx::{IdxDataset, Split};
use overlap_runtime::token_shards::locate;
use overlap_runtime::train::TrainConfig;
use overlap_runtime::{Error, Result};

use crate::args::TrainArgs;
use crate::flags::in_flag_terms;

/// Refuses every output of `config` (the run the flags `args` describe) over a file the flags
/// read that the `Trainer` does not.
pub(crate) fn refuse_outputs_over_inputs(args: &TrainArgs, config: &TrainConfig) -> Result<()> {
    refuse_outputs_over_held_out(args, config)?;
    refuse_outputs_over_init_params(args, config)?;
    refuse_outputs_over_sampling_inputs(args, config)
}

/// The files the run writes besides its checkpoints (`TrainConfig::output_files`), each with its
/// flag.
fn outputs(config: &TrainConfig) -> impl Iterator<Item = (&Path, String)> {
    config.output_files().map(|(path, setting)| (path, in_flag_terms(setting)))
}

/// Refuses outputs written over the held-out files of `--data` or `--tokens` when the run does not
/// read them (`--eval-every 0`): the `Trainer` protects the files a run reads, and these are data
/// a later run validates on. (A text's held-out part is in the file the run reads.)
fn refuse_outputs_over_held_out(args: &TrainArgs, config: &TrainConfig) -> Result<()> {
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
    for (path, flag) in outputs(config) {
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
fn refuse_outputs_over_init_params(args: &TrainArgs, config: &TrainConfig) -> Result<()> {
    let Some(start) = args.init_params.as_deref().and_then(|p| p.canonicalize().ok()) else { return Ok(()) };
    let over = outputs(config)
        .filter(|(_, flag)| flag != "--save-params")
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

/// Refuses any output written over a file `--sample` reads: the tokenizer, or the prompt's file.
fn refuse_outputs_over_sampling_inputs(args: &TrainArgs, config: &TrainConfig) -> Result<()> {
    let prompt = args.start.as_deref().and_then(|s| s.strip_prefix("FILE:")).map(Path::new);
    let read = [(args.tokenizer.as_deref(), "the --tokenizer file"), (prompt, "the --start file")];
    for (input, what) in read.into_iter().filter_map(|(path, what)| Some((path?.canonicalize().ok()?, what))) {
        if let Some((path, flag)) = outputs(config).find(|(path, _)| path.canonicalize().is_ok_and(|p| p == input)) {
            return Err(Error::Config(format!(
                "{flag} {} is {what}, which --sample reads: the run would write over it; give another file",
                path.display()
            )));
        }
    }
    Ok(())
}
