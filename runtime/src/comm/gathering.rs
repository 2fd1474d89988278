//! What the all-gathers of sharded optimizer state carry and keep (see `gather`): the
//! parameters' values on their way back, the handle that waits for them, and what the
//! communication thread keeps between a bucket's reduce-scatter and its all-gather.

use std::time::Instant;

use super::bucket::WaitChecks;
use super::lent::{Lent, ParamValues};
use super::mailbox::{Pending, Undelivered};
use crate::error::{Error, Result};
use crate::trace::recorder::{record, record_all_gather};
use crate::trace::span::Activity;

/// Bucket `index`'s parameters, every rank's updated shard in them, as the communication thread
/// hands them back.
pub(crate) struct GatheredParams {
    pub values: ParamValues,
    pub started: Instant,
    pub finished: Instant,
}

/// An all-gather on its way: the only way to its parameters is `wait`.
pub(crate) struct GatherInFlight {
    pub reply: Pending<GatheredParams>,
    pub bytes: usize,
    pub queued: Instant,
}

impl GatherInFlight {
    /// Blocks until bucket `index`'s all-gather is done, within `checks.timeout`; the time
    /// blocked and the all-gather go to the trace.
    pub(crate) fn wait(self, index: usize, checks: WaitChecks) -> Result<GatheredParams> {
        let blocked = Instant::now();
        let gathered = self.reply.wait(checks.timeout).map_err(|e| match e {
            Undelivered::TimedOut => Error::CommTimeout {
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

/// On the communication thread: the values each reduce-scatter left for its all-gather, and the
/// buffers MPI gathers through, kept from step to step.
#[derive(Default)]
pub(super) struct Gathers {
    kept: Vec<Option<ParamValues>>,
    buffers: Vec<Vec<f32>>,
}

impl Gathers {
    /// Keeps the values of bucket `index`'s `lent` parameters for its all-gather; their state
    /// goes back with the bucket.
    pub(super) fn keep(&mut self, index: usize, lent: &mut Lent) {
        if self.kept.len() <= index {
            self.kept.resize_with(index + 1, || None);
        }
        self.kept[index] = Some(lent.take_values());
    }

    /// The values bucket `index`'s reduce-scatter kept. Every rank queues the reduce-scatter of
    /// a bucket before its all-gather (the generated code launches them so), so they are here.
    pub(super) fn take(&mut self, index: usize) -> ParamValues {
        let kept = self.kept.get_mut(index).and_then(Option::take);
        kept.unwrap_or_else(|| panic!("bucket {index}'s all-gather came before its reduce-scatter"))
    }

    /// A zeroed buffer of `numel` values for bucket `index`'s all-gather through MPI.
    pub(super) fn buffer(&mut self, index: usize, numel: usize) -> &mut [f32] {
        if self.buffers.len() <= index {
            self.buffers.resize_with(index + 1, Vec::new);
        }
        let buffer = &mut self.buffers[index];
        if buffer.len() != numel {
            *buffer = vec![0.0; numel];
        }
        buffer
    }
}
