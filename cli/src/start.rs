//! The parameters a run starts from: the seed's initialisation, or a file's.

use overlap_runtime::params_file::FileNotes;
use overlap_runtime::{Communicator, DistributedModel, Error, Result};

use crate::args::TrainArgs;
use crate::flags;

/// The model every rank starts from: `--seed`'s initial values, or `--init-params`' (checked
/// against the data's `vocabulary` when both record one), with what the file records beside its
/// tensors (nothing without `--init-params`).
pub(crate) fn starting_model<M: DistributedModel>(
    args: &TrainArgs,
    comm: &Communicator,
    vocabulary: Option<String>,
) -> Result<(M, FileNotes)> {
    let mut model = M::new(comm, args.seed)?;
    let Some(path) = &args.init_params else { return Ok((model, FileNotes::default())) };
    // Every rank reads its own copy of the file; the `Trainer` checks that they start alike.
    let loaded = overlap_runtime::params_file::load_into_with_notes(&mut model, path)
        .map_err(|e| flags::naming("--init-params", e));
    let notes = overlap_runtime::train::agree_on_outcome(comm, loaded, "load its copy of --init-params")?;
    if let (Some(saved), Some(now)) = (&notes.vocabulary, vocabulary) {
        if let Some(why) = overlap_runtime::text::vocabulary_mismatch(saved, &now) {
            return Err(Error::Config(format!("--init-params {}: {why}", path.display())));
        }
    }
    Ok((model, notes))
}

/// Whether every rank finds the file (`--init-params`) or folder (`--resume`) it starts from. A
/// rank that does not took the default shape, which it could not read from there: its missing
/// file is what to say, not the shapes that then differ between the ranks.
pub(crate) fn agree_start_is_there(args: &TrainArgs, comm: &Communicator) -> Result<()> {
    let file = args.init_params.as_deref().and_then(|path| {
        let error = std::fs::metadata(path).err()?;
        Some(Error::Config(format!("--init-params {}: {error}", path.display())))
    });
    let folder = || args.resume.as_deref().and_then(|dir| overlap_runtime::checkpoint::latest_step_dir(dir).err());
    let missing = file.or_else(folder);
    overlap_runtime::train::agree_on_outcome(comm, missing.map_or(Ok(()), Err), "find what they start from")
}
