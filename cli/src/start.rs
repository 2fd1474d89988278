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

/// Why this rank could not read a model's shape from what it starts from (`--init-params`, or
/// `--resume`'s newest parameters file), if it could not: it then took the default shape, and
/// what to say when the ranks' shapes differ is that, not the shapes.
pub(crate) fn unreadable_start(args: &TrainArgs) -> Option<Error> {
    if let Some(path) = &args.init_params {
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(e) => return Some(Error::Config(format!("--init-params {}: {e}", path.display()))),
        };
        // A pipe is not read for its shape (the run reads it once, later).
        let shapes = metadata.is_file().then(|| overlap_runtime::params_file::param_shapes(path));
        return shapes?.err().map(|e| flags::naming("--init-params", e));
    }
    let dir = args.resume.as_deref()?;
    let step = match overlap_runtime::checkpoint::latest_step_dir(dir) {
        Ok(step) => step,
        Err(e) => return Some(e),
    };
    match overlap_runtime::checkpoint::latest_model_file(dir) {
        Some(file) => overlap_runtime::params_file::param_shapes(&file).err(),
        None => Some(Error::Checkpoint(format!("{}: holds no parameters file", step.display()))),
    }
}
