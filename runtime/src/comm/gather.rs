//! The all-gathers of sharded optimizer state, placed in the next forward by the generated code
//! of every model (PowerSGD's buckets aside).
//!
//! Each bucket's reduce-scatter updates this rank's shard of its parameters and leaves their
//! values on the communication thread (`Gathers::keep`). The step then launches the all-gathers
//! the plan groups them in (`Schedule::gather_groups`: one per bucket, or pieces of a bucket
//! that different layers read first) in the order the next forward reads them
//! (`Communicator::launch_gather`, which the generated `backward_on` calls after its last
//! launch); the forward waits for each right before the first layer that reads its parameters
//! (`Communicator::wait_gather`, from the generated `forward_gathering_on`), which gives them
//! back to the model. Until then those parameters are empty: a checkpoint or the end of a run
//! first waits for all of them (`finish_gathers`), and a forward of the plain kind
//! (`forward_with`) panics, naming `forward_gathering`.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use overlap_plan::Schedule;

use super::gathering::{GatherInFlight, GatherSlot};
use super::mailbox::Mailbox;
use super::{Backend, CommMode, Communicator, Held, ParamVecs};
use crate::error::{Error, Result};

/// The rule both misuses break, finished by what came too early.
const COME_BACK: &str = "with sharded optimizer state, a model's parameters come back at its next \
                         `forward_gathering` (or `Communicator::finish_gathers`), which must come before";

impl Communicator {
    /// Whether the all-gathers of a model planned as `schedule` are launched for the next
    /// forward: it shards its optimizer state, and sharded buckets gather (see `gathers_shards`).
    pub(crate) fn gathers_in_forward(&self, schedule: &Schedule) -> bool {
        self.shards_optimizer(schedule) && self.gathers_shards()
    }

    /// Whether a sharded bucket's parameters are all-gathered for the next forward: over several
    /// ranks (one has nothing to gather, and `--compute-only` sends nothing).
    pub(super) fn gathers_shards(&self) -> bool {
        self.world_size() > 1 && matches!(self.backend, Backend::Mpi(_)) && self.mode.get() != CommMode::Skip
    }

    /// Records whether bucket `bucket`'s launch this step was sharded, for `launch_gather`.
    pub(super) fn note_sharded_launch(&self, bucket: usize, sharded: bool) {
        let mut launches = self.sharded_launches.borrow_mut();
        if launches.len() <= bucket {
            launches.resize(bucket + 1, false);
        }
        launches[bucket] = sharded;
    }

    /// Starts all-gather `group` (in launch order): of elements `elements` of bucket `bucket`'s
    /// updated shards, when its reduce-scatter kept them for it; nothing otherwise. The generated
    /// `backward_on` calls it for each after the last launch, in the order the next forward
    /// needs them.
    pub fn launch_gather(&self, group: usize, bucket: usize, elements: Range<usize>) {
        let Backend::Mpi(t) = &self.backend else { return };
        let sharded = self.sharded_launches.borrow().get(bucket).copied().unwrap_or(false);
        if !sharded || !self.gathers_shards() {
            return;
        }
        // Launching over parameters no forward took back would lose them.
        assert!(
            self.gathers.borrow().get(group).is_none_or(Option::is_none),
            "all-gather {group} of an earlier step was never waited for: {COME_BACK} another step on the same \
             communicator, of this model or another"
        );
        // The step's updates, when they await the clip, come before any all-gather.
        self.ask_for_clip();
        let mut boxes = self.gather_mailboxes.borrow_mut();
        if boxes.len() <= group {
            boxes.resize_with(group + 1, Arc::default);
        }
        let (reply, pending) = Mailbox::open(&mut boxes[group]);
        drop(boxes);
        let bytes = elements.len() * std::mem::size_of::<f32>();
        if self.mode.get() == CommMode::AfterBackward {
            self.held.borrow_mut().push(Held::Gather { bucket, elements, reply });
        } else {
            t.all_gather(bucket, elements, reply);
        }
        let mut gathers = self.gathers.borrow_mut();
        if gathers.len() <= group {
            gathers.resize_with(group + 1, || None);
        }
        gathers[group] =
            Some(GatherSlot::InFlight(GatherInFlight { reply: pending, bucket, bytes, queued: Instant::now() }));
    }

    /// The wait point of all-gather `group`: gives its parameters, every rank's updated shard in
    /// them, back to `params`. Nothing to do when none is in flight. An error, leaving them for
    /// their own model, when `params` did not lend them (another model's forward on the same
    /// communicator).
    pub fn wait_gather<P: ParamVecs>(&self, group: usize, params: &mut P) -> Result<()> {
        let Some(slot) = self.gathers.borrow_mut().get_mut(group).and_then(Option::take) else {
            return Ok(());
        };
        let (bucket, mut values) = match slot {
            GatherSlot::InFlight(in_flight) => (in_flight.bucket, in_flight.wait(self.checks.get())?.values),
            GatherSlot::Arrived { bucket, values } => (bucket, values),
        };
        if !values.awaited_by(params) {
            self.gathers.borrow_mut()[group] = Some(GatherSlot::Arrived { bucket, values });
            return Err(Error::Config(format!(
                "all-gather {group} (bucket b{bucket}) carries another model's parameters: {COME_BACK} another \
                 model's forward on the same communicator"
            )));
        }
        values.give_back(params);
        Ok(())
    }

    /// Waits for every all-gather in flight, giving each bucket's parameters back to `params`:
    /// before anything reads all of them (a forward without wait points, a checkpoint, the end
    /// of a run).
    pub fn finish_gathers<P: ParamVecs>(&self, params: &mut P) -> Result<()> {
        let count = self.gathers.borrow().len();
        (0..count).try_for_each(|group| self.wait_gather(group, params))
    }
}
