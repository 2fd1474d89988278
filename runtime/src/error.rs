//! The runtime's error type: everything a rank can report instead of hanging or panicking.

use std::path::PathBuf;

/// Everything the library can fail at: each variant's message says what, and where a setting
/// is at fault, names it (`TrainConfig::batch`; the command line shows its flag instead).
#[derive(thiserror::Error)]
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
    #[error("gradient bucket b{bucket} was not reduced within {waited:?} on rank {rank} (`CommConfig::wait_timeout`): {behind}")]
    CommTimeout { bucket: usize, rank: usize, waited: std::time::Duration, behind: String },
    #[error(
        "the updated parameters of gradient bucket b{bucket} were not all-gathered within {waited:?} on rank {rank} \
         (`CommConfig::wait_timeout`): {behind}"
    )]
    GatherTimeout { bucket: usize, rank: usize, waited: std::time::Duration, behind: String },
    #[error(
        "{} waited {waited:?} for every rank to start (MPI initialisation and the shared-memory \
         set-up; `CommConfig::wait_timeout`): {behind}",
        rank.map_or("this rank".into(), |r| format!("rank {r}"))
    )]
    StartupTimeout { rank: Option<usize>, waited: std::time::Duration, behind: String },
    #[error("rank {rank} waited {waited:?} while {what} (`CommConfig::wait_timeout`): {behind}")]
    CollectiveTimeout { what: &'static str, rank: usize, waited: std::time::Duration, behind: String },
    #[error(
        "non-finite gradient {value} in bucket b{bucket} at element {offset} after the all-reduce (`CommConfig::check_finite`)"
    )]
    NonFiniteGradient { bucket: usize, offset: usize, value: f32 },
    #[error(
        "non-finite value {value} in PowerSGD's factor {factor} of bucket b{bucket} after its all-reduce \
         (`CommConfig::check_finite`): a gradient of the bucket's layers is not finite on some rank"
    )]
    NonFiniteFactor { bucket: usize, factor: &'static str, value: f32 },
    #[error("non-finite gradient {value} in `{param}` (element {element}) at step {step}, after the all-reduce (`CommConfig::check_finite`)")]
    NonFiniteParameter { param: String, element: usize, step: u64, value: f32 },
    #[error(
        "gradient bucket b{bucket} overflowed {format} on the wire: element {offset} is {value} after the \
         all-reduce (`CommConfig::check_finite`); a gradient or its mean over the ranks exceeds {format}'s range \
         (fp16: ±65504): send this bucket as bf16 or fp32"
    )]
    WireOverflow { bucket: usize, format: overlap_plan::WireFormat, offset: usize, value: f32 },
    #[error(
        "the gradient of `{param}` overflowed {format} on the wire at step {step}: element {element} is {value} after \
         the all-reduce (`CommConfig::check_finite`); a gradient or its mean over the ranks exceeds {format}'s range \
         (fp16: ±65504): send this bucket as bf16 or fp32"
    )]
    ParameterOverflow { param: String, element: usize, step: u64, format: overlap_plan::WireFormat, value: f32 },
    /// Sampling from a model whose outputs are NaN or infinite: it would draw one token forever.
    #[error(
        "sampling: the model's output for token {token} is {value} (drawing token {drawn} of the sample): its \
         parameters are not finite, as after a diverged run"
    )]
    NonFiniteOutput { token: usize, drawn: usize, value: f32 },
    /// A model whose `grad_comm` the GPU backend does not run (`Schedule::grad_comm`).
    #[error(
        "{model}: grad_comm = {chosen} is not supported on the GPU yet (NCCL sums FP32 there, and PowerSGD runs \
         on CPUs only); use grad_comm = fp32 for `TrainConfig::device` cuda"
    )]
    GradCommOnGpu { model: String, chosen: String },
    #[error(transparent)]
    Data(#[from] crate::idx::IdxError),
    /// What asked for CUDA (the `TrainConfig::device` setting, or listing the CUDA libraries).
    #[error(
        "{0}: this binary was built without CUDA support; rebuild with `--features cuda` \
         (e.g. cargo build --release --examples --features cuda)"
    )]
    CudaNotBuilt(&'static str),
    #[error("CUDA: {0}")]
    Cuda(String),
    #[error("{0}")]
    Loss(String),
    #[error("data: {0}")]
    Dataset(String),
    #[error(
        "stopped by {} after step {step}: {}",
        signal_name(*signal),
        checkpoint.as_ref().map_or("no checkpoint (the run does not save)".into(),
            |c| format!("checkpoint {}, resume with `TrainConfig::resume`", c.display()))
    )]
    Stopped { signal: i32, step: u64, checkpoint: Option<PathBuf> },
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    #[error("checkpoint {} does not fit this run:{}", path.display(), problems.iter().map(|p| format!("\n  - {p}")).collect::<String>())]
    CheckpointMismatch { path: PathBuf, problems: Vec<String> },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `SIGTERM`, `SIGINT`, or the number: how `Error::Stopped` and the stop message name a signal.
pub fn signal_name(signal: i32) -> String {
    match signal {
        signal_hook::consts::SIGTERM => "SIGTERM".into(),
        signal_hook::consts::SIGINT => "SIGINT".into(),
        signal_hook::consts::SIGHUP => "SIGHUP".into(),
        other => format!("signal {other}"),
    }
}

/// What the host's operations fail with (`program::Host`'s `Storage::Error`): never.
impl From<std::convert::Infallible> for Error {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

/// The message, as `Display` writes it: what `fn main() -> overlap::Result<()>` and `unwrap`
/// print on an error, for a user to read rather than a variant's fields.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_prints_the_message() {
        let error = super::Error::Config("`TrainConfig::batch` must be at least 1".into());
        assert_eq!(format!("{error:?}"), "invalid configuration: `TrainConfig::batch` must be at least 1");
    }
}
