//! The runtime's error type: everything a rank can report instead of hanging or panicking.

use std::path::PathBuf;

/// Ranks, for a message: `1, 3`.
pub(crate) fn rank_list(ranks: &[usize]) -> String {
    ranks.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Everything the library can fail at: each variant's message says what, and where a setting
/// is at fault, names it (`TrainConfig::batch`; the command line shows its flag instead).
#[derive(thiserror::Error)]
pub enum Error {
    /// MPI could not start (every rank refused alike, e.g. the transports they chose), or the
    /// communication thread could not be spawned; the message says which.
    #[error("MPI could not be initialised: {0}")]
    MpiInit(String),
    /// The ranks compiled different schedules: found by the handshake before any gradient is
    /// exchanged, so the job fails on every rank instead of hanging.
    #[error(
        "ranks disagree on the compiled schedule of `{model}`: rank(s) {} have a different \
         model or bucket plan than rank 0 (fingerprints {fingerprints:016x?}); build every rank from the same source",
        rank_list(differing)
    )]
    ScheduleMismatch {
        /// The model's name, as the schedule records it (`Schedule::model`).
        model: String,
        /// The ranks whose fingerprint differs from rank 0's, ascending.
        differing: Vec<usize>,
        /// Every rank's `Schedule::fingerprint`, indexed by rank.
        fingerprints: Vec<u64>,
    },
    /// The communication thread went away (it panicked or ended) while this rank waited for it;
    /// the field says what it was doing, e.g. `reducing a gradient bucket`.
    #[error("the communication thread stopped unexpectedly while {0}")]
    CommThreadDied(&'static str),
    /// Settings (or an input) the run cannot use; the message says why, naming the setting where
    /// one is at fault.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Reading or writing a file or folder failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder that was being read, written or created.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A safetensors parameter file could not be written or read, or does not fit the model; the
    /// message names the file.
    #[error("{0}")]
    Safetensors(String),
    /// A gradient bucket's all-reduce (or reduce-scatter) did not finish within
    /// `CommConfig::wait_timeout`: some rank has stopped or is far behind.
    #[error("gradient bucket b{bucket} was not reduced within {waited:?} on rank {rank} (`CommConfig::wait_timeout`): {behind}")]
    CommTimeout {
        /// The bucket's index in launch order (`b3` in the trace).
        bucket: usize,
        /// The rank that gave up waiting.
        rank: usize,
        /// How long it waited: the configured timeout.
        waited: std::time::Duration,
        /// Which ranks it was waiting for, in words, from the job's progress board.
        behind: String,
    },
    /// The all-gather of a sharded bucket's updated parameters did not finish within
    /// `CommConfig::wait_timeout`.
    #[error(
        "the updated parameters of gradient bucket b{bucket} were not all-gathered within {waited:?} on rank {rank} \
         (`CommConfig::wait_timeout`): {behind}"
    )]
    GatherTimeout {
        /// The bucket's index in launch order.
        bucket: usize,
        /// The rank that gave up waiting.
        rank: usize,
        /// How long it waited: the configured timeout.
        waited: std::time::Duration,
        /// Which ranks it was waiting for, in words, from the job's progress board.
        behind: String,
    },
    /// Not every rank finished start-up (MPI initialisation and the shared-memory set-up) within
    /// `CommConfig::wait_timeout`.
    #[error(
        "{} waited {waited:?} for every rank to start (MPI initialisation and the shared-memory \
         set-up; `CommConfig::wait_timeout`): {behind}",
        rank.map_or("this rank".into(), |r| format!("rank {r}"))
    )]
    StartupTimeout {
        /// This rank, as the launcher numbers it; `None` where there is no progress board to say.
        rank: Option<usize>,
        /// How long it waited: the configured timeout.
        waited: std::time::Duration,
        /// Which ranks it was waiting for, in words, from the job's progress board.
        behind: String,
    },
    /// A collective other than a bucket's (a barrier, a small all-gather, the GPU's queued work)
    /// did not finish within `CommConfig::wait_timeout`.
    #[error("rank {rank} waited {waited:?} while {what} (`CommConfig::wait_timeout`): {behind}")]
    CollectiveTimeout {
        /// What the rank was waiting for, e.g. `waiting for rank 0 to write a checkpoint`.
        what: &'static str,
        /// The rank that gave up waiting.
        rank: usize,
        /// How long it waited.
        waited: std::time::Duration,
        /// Which ranks it was waiting for, in words, or why they cannot be named.
        behind: String,
    },
    /// With `CommConfig::check_finite`, a bucket's summed gradient holds a NaN or an infinity.
    /// The trainer names the parameter instead where it can (`NonFiniteParameter`).
    #[error(
        "non-finite gradient {value} in bucket b{bucket} at element {offset} after the all-reduce (`CommConfig::check_finite`)"
    )]
    NonFiniteGradient {
        /// The bucket's index in launch order.
        bucket: usize,
        /// The element's offset in the bucket's flat buffer.
        offset: usize,
        /// The non-finite value found (NaN or ±inf).
        value: f32,
    },
    /// With `CommConfig::check_finite`, a sum of one of PowerSGD's low-rank factors holds a NaN
    /// or an infinity.
    #[error(
        "non-finite value {value} in PowerSGD's factor {factor} of bucket b{bucket} after its all-reduce \
         (`CommConfig::check_finite`): a gradient of the bucket's layers is not finite on some rank"
    )]
    NonFiniteFactor {
        /// The bucket's index in launch order.
        bucket: usize,
        /// Which factor: `"P"` or `"Q"`.
        factor: &'static str,
        /// The non-finite value found.
        value: f32,
    },
    /// `NonFiniteGradient`, named by the parameter and the step it was found at.
    #[error("non-finite gradient {value} in `{param}` (element {element}) at step {step}, after the all-reduce (`CommConfig::check_finite`)")]
    NonFiniteParameter {
        /// The parameter's path, as checkpoints name it (`blocks.3.fc.weight`).
        param: String,
        /// The element's flat index within the parameter.
        element: usize,
        /// The step, counted from 1.
        step: u64,
        /// The non-finite value found.
        value: f32,
    },
    /// With `CommConfig::check_finite`, an infinity in a bucket sent as fp16 or bf16: the sum left
    /// the wire format's range (the model itself may be fine).
    #[error(
        "gradient bucket b{bucket} overflowed {format} on the wire: element {offset} is {value} after the \
         all-reduce (`CommConfig::check_finite`); a gradient or its mean over the ranks exceeds {format}'s range \
         (fp16: ±65504): send this bucket as bf16 or fp32"
    )]
    WireOverflow {
        /// The bucket's index in launch order.
        bucket: usize,
        /// The narrow format the bucket was sent in.
        format: overlap_plan::WireFormat,
        /// The element's offset in the bucket's flat buffer.
        offset: usize,
        /// The infinity found.
        value: f32,
    },
    /// `WireOverflow`, named by the parameter and the step it was found at.
    #[error(
        "the gradient of `{param}` overflowed {format} on the wire at step {step}: element {element} is {value} after \
         the all-reduce (`CommConfig::check_finite`); a gradient or its mean over the ranks exceeds {format}'s range \
         (fp16: ±65504): send this bucket as bf16 or fp32"
    )]
    ParameterOverflow {
        /// The parameter's path, as checkpoints name it (`blocks.3.fc.weight`).
        param: String,
        /// The element's flat index within the parameter.
        element: usize,
        /// The step, counted from 1.
        step: u64,
        /// The narrow format the bucket was sent in.
        format: overlap_plan::WireFormat,
        /// The infinity found.
        value: f32,
    },
    /// Sampling from a model whose outputs are NaN or infinite: it would draw one token forever.
    /// (Finite parameters of 1e37 overflow too: the message does not blame non-finite ones alone.)
    #[error(
        "sampling: the model's output for token {token} is {value} (drawing token {drawn} of the sample): its \
         parameters are not finite, or so large that its computation overflows, as after a diverged run"
    )]
    NonFiniteOutput {
        /// The vocabulary index whose output is not finite.
        token: usize,
        /// How many tokens had been drawn after the prompt, counted from 0.
        drawn: usize,
        /// The output found.
        value: f32,
    },
    /// A model whose `grad_comm` the GPU backend does not run (`Schedule::grad_comm`).
    #[error(
        "{model}: grad_comm = {chosen} is not supported on the GPU yet (NCCL sums FP32 there, and PowerSGD runs \
         on CPUs only); use grad_comm = fp32 for `TrainConfig::device` cuda"
    )]
    GradCommOnGpu {
        /// The model's name, as the schedule records it.
        model: String,
        /// What `grad_comm` chose, as `Schedule::grad_comm` writes it (`bf16`,
        /// `powersgd(rank = 4, start_iter = 10)`).
        chosen: String,
    },
    /// An MNIST-style IDX file could not be found, read or parsed.
    #[error(transparent)]
    Data(#[from] crate::idx::IdxError),
    /// What asked for CUDA (the `TrainConfig::device` setting, or listing the CUDA libraries).
    #[error(
        "{0}: this binary was built without CUDA support; rebuild with `--features cuda` \
         (e.g. cargo build --release --examples --features cuda; in a crate of your own, \
         `overlap = {{ version = .., features = [\"cuda\"] }}`)"
    )]
    CudaNotBuilt(&'static str),
    /// The GPU backend failed: no usable device or driver, or a CUDA, cuBLAS or NCCL call returned
    /// an error; the message names the call.
    #[error("CUDA: {0}")]
    Cuda(String),
    /// The loss is not finite, or a `Loss` was given outputs, labels or targets it cannot use, or
    /// returned a gradient of the wrong shape or a non-finite one.
    #[error("{0}")]
    Loss(String),
    /// A dataset or its files cannot give what the run asks for: missing or malformed token
    /// shards or text, too few samples, rows of the wrong width, a token id outside the vocabulary.
    #[error("data: {0}")]
    Dataset(String),
    /// The checkpoint resumed is at the total of steps to reach, or past it: no step is left.
    #[error(
        "the checkpoint is at step {step}, and {total} steps is the total to reach: nothing to do (give a larger \
         total to train on{})",
        parameters.as_ref().map_or(String::new(), |p| format!("; its parameters are in {}", p.display()))
    )]
    NothingToDo {
        /// The step the checkpoint would resume at (the steps it holds).
        step: u64,
        /// The total of steps asked for (`TrainConfig::steps`).
        total: u64,
        /// The checkpoint's parameters file, which `--init-params` reads without resuming.
        parameters: Option<PathBuf>,
    },
    /// Every rank agreed to stop on a signal (SIGTERM, SIGINT, SIGHUP) and did, after writing a
    /// checkpoint where the run saves; the command line exits with 128 + the signal.
    #[error(
        "stopped by {} after step {step}: {}{}",
        signal_name(*signal),
        checkpoint.as_ref().map_or("no checkpoint (the run does not save)".into(),
            |c| format!("checkpoint {}, resume with `TrainConfig::resume`", c.display())),
        unwritten.as_ref().map_or(String::new(),
            |p| format!("; {} is not written (`TrainConfig::save_params` holds the parameters after the last step)", p.display()))
    )]
    Stopped {
        /// The signal's number (`signal_hook::consts::SIGTERM`, ...).
        signal: i32,
        /// The steps done, the last of them counted from 1.
        step: u64,
        /// The step folder written as the run stopped, to resume from; `None` where the run
        /// does not save.
        checkpoint: Option<PathBuf>,
        /// The final parameters file the run would have written after its last step, which a
        /// stop does not write.
        unwritten: Option<PathBuf>,
    },
    /// A checkpoint could not be written or read back, or its folder could not be claimed (it
    /// holds another run's checkpoints, or another run is saving there); the message names the file.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// A checkpoint that reads well but that this run cannot resume: another model or optimizer,
    /// PowerSGD state the model would drop or of another number of ranks, tensors missing or of
    /// other shapes.
    #[error("checkpoint {} does not fit this run:{}", path.display(), problems.iter().map(|p| format!("\n  - {p}")).collect::<String>())]
    CheckpointMismatch {
        /// The checkpoint's step folder (`.../step-00000400`).
        path: PathBuf,
        /// Every difference found, one sentence each.
        problems: Vec<String>,
    },
}

/// The library's `Result`: its error is [`Error`] unless given.
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
/// A setting written as text that does not parse (`"world=64,link=ib-ndr".parse::<Cluster>()`,
/// an `LrSchedule`): the message says what was expected. `?` turns it into
/// [`Error::Config`], so that a program returning `overlap::Result` parses with `?`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

impl From<ParseError> for Error {
    fn from(e: ParseError) -> Self {
        Error::Config(e.0)
    }
}

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

    #[test]
    fn a_stop_names_the_parameters_file_it_did_not_write() {
        let stopped = |unwritten: Option<&str>| super::Error::Stopped {
            signal: 15,
            step: 3,
            checkpoint: None,
            unwritten: unwritten.map(Into::into),
        };
        assert_eq!(stopped(None).to_string(), "stopped by SIGTERM after step 3: no checkpoint (the run does not save)");
        assert_eq!(
            stopped(Some("p.st")).to_string(),
            "stopped by SIGTERM after step 3: no checkpoint (the run does not save); p.st is not written \
             (`TrainConfig::save_params` holds the parameters after the last step)"
        );
    }
}
