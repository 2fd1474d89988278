//! A run's communication settings as one plain value (`TrainConfig::comm`): the transport the
//! communicator starts with, and what `Communicator::apply` sets at the start of a run.

use std::time::Duration;

use overlap_plan::Link;

use super::mode::{CommMode, Transport};
use super::wire::WireFormat;

/// How long a rank waits for the others by default, at start-up, at a wait point or in a
/// blocking collective, before it fails naming the ranks it waited for. Generous, like NCCL's
/// watchdog: a healthy job never waits this long, a stuck one does not hang forever.
pub const DEFAULT_COMM_TIMEOUT: Duration = Duration::from_secs(600);

/// How the ranks' gradients are summed in a run. Errors name these fields as `comm.<field>`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CommConfig {
    /// What sums the buckets; chosen when the communicator starts (`Communicator::start_with`).
    pub transport: Transport,
    /// When the all-reduces start: overlapped with backward (the compiled schedule), after it,
    /// or never (compute alone).
    pub mode: CommMode,
    /// An interconnect to emulate: every all-reduce takes at least as long as on it.
    pub link: Option<Link>,
    /// Fail at a wait point on a NaN or infinity in the reduced gradients.
    pub check_finite: bool,
    /// Every bucket in this format, whatever the schedule's `grad_comm` says (`None`: the
    /// schedule's formats, PowerSGD included, or those of `Communicator::set_bucket_wire_formats`).
    pub grad_comm: Option<WireFormat>,
    /// Bound on every wait for the other ranks (`None`: as long as the job lives).
    pub wait_timeout: Option<Duration>,
    /// Shard the optimizer state over the ranks (ZeRO-1: each bucket reduce-scattered, each rank
    /// updating its own slice with state for it alone, the slices all-gathered) or keep it whole
    /// on every rank; `None`: as the model's `#[distributed_model(shard_optimizer)]` says. Every
    /// rank must choose the same.
    pub shard_optimizer: Option<bool>,
}

impl Default for CommConfig {
    fn default() -> Self {
        CommConfig {
            transport: Transport::Auto,
            mode: CommMode::Overlap,
            link: None,
            check_finite: false,
            grad_comm: None,
            wait_timeout: Some(DEFAULT_COMM_TIMEOUT),
            shard_optimizer: None,
        }
    }
}
