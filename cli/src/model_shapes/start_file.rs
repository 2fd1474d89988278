//! What a run's start file holds: the parameters file of `--init-params`, or the newest
//! checkpoint's of `--resume`, by its parameters' names and shapes, which tell a compiled shape
//! (as nanoGPT's `sample.py` takes a model's sizes from its checkpoint).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use overlap_runtime::checkpoint::latest_model_file;
use overlap_runtime::params_file::param_shapes;

use super::words::last_value;

/// A model's parameters by name, with their shapes, sorted by name: what tells a compiled shape.
pub type ParameterShapes = Vec<(String, Vec<usize>)>;

/// The parameters, by name with their shapes and sorted, of `argv`'s start file (its header
/// alone is read: the run reads the values), and the flag
/// that named it as typed (`--init-params b.st`). `None` without a start file, where it cannot
/// be read (the run then refuses it, with its reason), or where it is not a regular file: a pipe
/// (`--init-params <(zcat p.safetensors.gz)`) read here would leave the run nothing to read.
pub(super) fn parameters_of_start(argv: &[OsString]) -> Option<(ParameterShapes, String)> {
    let (file, from) = match (last_value(argv, "--init-params"), last_value(argv, "--resume")) {
        (Some(file), _) => (PathBuf::from(&file), format!("--init-params {}", file.to_string_lossy())),
        (None, Some(dir)) => (latest_model_file(Path::new(&dir))?, format!("--resume {}", dir.to_string_lossy())),
        (None, None) => return None,
    };
    if !std::fs::metadata(&file).is_ok_and(|m| m.is_file()) {
        return None;
    }
    Some((param_shapes(&file).ok()?, from))
}
