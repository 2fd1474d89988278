//! The all-gathers of sharded optimizer state, placed in the next forward
//! (`#[distributed_model(shard_optimizer)]`).
//!
//! Each bucket's reduce-scatter updates this rank's shard of its parameters and leaves their
//! values on the communication thread (`Gathers::keep`). The step then launches one all-gather
//! per bucket in the order the next forward reads them, the first layers' first
//! (`Communicator::launch_gather`, which the generated `backward_on` calls after its last
//! launch); the forward waits for each right before the first layer that reads its parameters
//! (`Communicator::wait_gather`, from the generated `forward_gathering_on`), which gives them
//! back to the model. Until then those parameters are empty: a forward of the plain kind
//! (`forward_with`), a checkpoint or the end of a run first waits for all of them
//! (`finish_gathers`).

use std::sync::Arc;
use std::time::Instant;

use super::bucket::WaitChecks;
use super::lent::{Lent, ParamValues};
use super::mailbox::{Mailbox, Pending, Undelivered};
use super::{Backend, CommMode, Communicator, Held, ParamVecs};
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

/// An all-gather on its way: the only way to its parameters is `Communicator::wait_gather`.
pub(crate) struct GatherInFlight {
    reply: Pending<GatheredParams>,
    bytes: usize,
    queued: Instant,
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
    /// goes back with the bucket. Always `true` (it comes after a reduce-scatter that went well).
    pub(super) fn keep(&mut self, index: usize, lent: &mut Lent) -> bool {
        if self.kept.len() <= index {
            self.kept.resize_with(index + 1, || None);
        }
        self.kept[index] = Some(lent.take_values());
        true
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

impl Communicator {
    /// Whether the all-gathers of sharded buckets wait for the next forward (the model was
    /// compiled with `shard_optimizer` and the run shards) rather than end each reduce-scatter.
    pub(crate) fn gathers_in_forward(&self) -> bool {
        self.shards_optimizer()
            && self.gather_points.get()
            && matches!(self.backend, Backend::Mpi(_))
            && self.mode.get() != CommMode::Skip
    }

    /// Starts the all-gather of bucket `index`'s updated shards (`numel` elements), when its
    /// reduce-scatter kept them for it; nothing otherwise. The generated `backward_on` calls it
    /// for every bucket after the last launch, in the order the next forward needs them.
    pub fn launch_gather(&self, index: usize, numel: usize) {
        let Backend::Mpi(t) = &self.backend else { return };
        if !self.gathers_in_forward() {
            return;
        }
        let mut boxes = self.gather_mailboxes.borrow_mut();
        if boxes.len() <= index {
            boxes.resize_with(index + 1, Arc::default);
        }
        let (reply, pending) = Mailbox::open(&mut boxes[index]);
        drop(boxes);
        if self.mode.get() == CommMode::AfterBackward {
            self.held.borrow_mut().push(Held::Gather { index, numel, reply });
        } else {
            t.all_gather(index, numel, reply);
        }
        let mut gathers = self.gathers.borrow_mut();
        if gathers.len() <= index {
            gathers.resize_with(index + 1, || None);
        }
        let bytes = numel * std::mem::size_of::<f32>();
        gathers[index] = Some(GatherInFlight { reply: pending, bytes, queued: Instant::now() });
    }

    /// The wait point of bucket `index`'s all-gather: gives its parameters, every rank's updated
    /// shard in them, back to `params`. Nothing to do when none is in flight.
    pub fn wait_gather<P: ParamVecs>(&self, index: usize, params: &mut P) -> Result<()> {
        let Some(in_flight) = self.gathers.borrow_mut().get_mut(index).and_then(Option::take) else {
            return Ok(());
        };
        let checks: WaitChecks = self.checks.get();
        let blocked = Instant::now();
        let mut gathered = in_flight.reply.wait(checks.timeout).map_err(|e| match e {
            Undelivered::TimedOut => Error::CommTimeout {
                bucket: index,
                rank: checks.rank,
                waited: checks.timeout.unwrap_or_default(),
                behind: super::board::laggards(),
            },
            Undelivered::Abandoned => Error::CommThreadDied("all-gathering a bucket's parameters"),
        })?;
        record(Activity::WaitGather { bucket: index as u32 }, blocked, Instant::now());
        record_all_gather(index, in_flight.bytes, in_flight.queued, gathered.started, gathered.finished);
        gathered.values.give_back(params);
        Ok(())
    }

    /// Waits for every all-gather in flight, giving each bucket's parameters back to `params`:
    /// before anything reads all of them (a forward without wait points, a checkpoint, the end
    /// of a run).
    pub fn finish_gathers<P: ParamVecs>(&self, params: &mut P) -> Result<()> {
        let count = self.gathers.borrow().len();
        (0..count).rev().try_for_each(|index| self.wait_gather(index, params))
    }
}
