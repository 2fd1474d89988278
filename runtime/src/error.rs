//! The runtime's error type: everything a rank can report instead of hanging or panicking.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("MPI could not be initialised: {0}")]
    MpiInit(String),
    #[error(
        "ranks disagree on the compiled schedule of `{model}`: rank(s) {differing:?} have a different \
         model or bucket plan than rank 0 (fingerprints {fingerprints:016x?}); build every rank from the same source"
    )]
    ScheduleMismatch { model: String, differing: Vec<usize>, fingerprints: Vec<u64> },
    #[error("the communication thread stopped unexpectedly while {0}")]
    CommThreadDied(&'static str),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Safetensors(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
