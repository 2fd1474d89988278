//! What the all-gathers of sharded optimizer state carry and keep (see `gather`): the
//! parameters' values on their way back, the handle that waits for them, and what the
//! communication thread keeps between a bucket's reduce-scatter and its all-gather.

use std::ops::Range;
use std::time::Instant;

use super::in_flight::WaitChecks;
use super::lent::{Lent, ParamValues};
use super::mailbox::{Pending, Undelivered};
use crate::error::{Error, Result};
use crate::trace::recorder::{record, record_all_gather};
use crate::trace::span::Activity;

/// An all-gather's parameters, every rank's updated shard in them, as the communication thread
/// hands them back.
pub(crate) struct GatheredParams {
    pub values: ParamValues,
    pub started: Instant,
    pub finished: Instant,
}

/// An all-gather group's parameters on the compute thread's side: on their way, or arrived at
/// the wait point of a model they do not belong to, which left them for their own.
pub(crate) enum GatherSlot {
    InFlight(GatherInFlight),
    Arrived { bucket: usize, values: ParamValues },
}

/// An all-gather on its way: the only way to its parameters is `wait`.
pub(crate) struct GatherInFlight {
    pub reply: Pending<GatheredParams>,
    /// The bucket whose parameters it carries (all of them, or some).
    pub bucket: usize,
    pub bytes: usize,
    pub queued: Instant,
}

impl GatherInFlight {
    /// Blocks until the all-gather is done, within `checks.timeout`; the time blocked and the
    /// all-gather go to the trace.
    pub(crate) fn wait(self, checks: WaitChecks) -> Result<GatheredParams> {
        let index = self.bucket;
        let blocked = Instant::now();
        let gathered = self.reply.wait(checks.timeout).map_err(|e| match e {
            Undelivered::TimedOut => Error::GatherTimeout {
                bucket: index,
                rank: checks.rank,
                waited: checks.timeout.unwrap_or_default(),
                behind: super::board::laggards(),
            },
            Undelivered::Abandoned => Error::CommThreadDied("all-gathering a bucket's parameters"),
        })?;
        record(Activity::WaitGather { bucket: index as u32 }, blocked, Instant::now());
        record_all_gather(index, self.bytes, self.queued, gathered.started, gathered.finished);
        Ok(gathered)
    }
}

/// On the communication thread: the values each reduce-scatter left for its all-gathers (with
/// its bucket's length), and the buffer MPI gathers through, kept from step to step.
#[derive(Default)]
pub(super) struct Gathers {
    kept: Vec<Option<(usize, ParamValues)>>,
    buffer: Vec<f32>,
}

impl Gathers {
    /// Keeps the values of bucket `index`'s `lent` parameters (of `numel` elements) for its
    /// all-gathers; their state goes back with the bucket.
    pub(super) fn keep(&mut self, index: usize, numel: usize, lent: &mut Lent) {
        if self.kept.len() <= index {
            self.kept.resize_with(index + 1, || None);
        }
        self.kept[index] = Some((numel, lent.take_values()));
    }

    /// The values of the parameters in `elements` of bucket `bucket` that its reduce-scatter
    /// kept, and the bucket's length. Every rank queues the reduce-scatter of a bucket before
    /// its all-gathers (the generated code launches them so), so they are here.
    pub(super) fn take(&mut self, bucket: usize, elements: Range<usize>) -> (usize, ParamValues) {
        let kept = self.kept.get_mut(bucket).and_then(Option::as_mut);
        let (numel, values) =
            kept.unwrap_or_else(|| panic!("bucket {bucket}'s all-gather came before its reduce-scatter"));
        let (numel, taken, drained) = (*numel, values.split_off(elements), values.is_empty());
        if drained {
            self.kept[bucket] = None;
        }
        (numel, taken)
    }

    /// A buffer of at least `len` values for an all-gather through MPI.
    pub(super) fn buffer(&mut self, len: usize) -> &mut [f32] {
        if self.buffer.len() < len {
            self.buffer.resize(len, 0.0);
        }
        &mut self.buffer[..len]
    }
}
