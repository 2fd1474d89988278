//! The compute thread's side of a sharded bucket's launch (ZeRO-1): what it lends to the
//! reduce-scatter, and when a clipping step asks the communication thread for its clip (see
//! `shard_server`).

use overlap_plan::shard_of;

use super::{Backend, BucketMember, CommMode, Communicator, GradBucket, Held, ParamVecs};
use crate::optim::Optimizer;

impl Communicator {
    /// Lends `members` with the optimizer state of this rank's shard of `bucket`, to be updated
    /// as the shard's sums arrive; with clipping or the finiteness check, once the step's global
    /// norm is known (the communication thread's, or the wait point's on one process or without
    /// communication, where the check lends nothing: the wait point checks the sums whole).
    pub(super) fn lend_shard<P: ParamVecs, O: Optimizer>(
        &self,
        bucket: &mut GradBucket,
        members: &[BucketMember],
        params: &mut P,
        optimizer: &mut O,
        grad_scale: f32,
    ) {
        let (clip, check_finite) = (optimizer.grad_clip().map(|c| *c), self.checks.get().finite);
        if check_finite && !self.gathers_shards() {
            return;
        }
        let shard = shard_of(bucket.len(), self.world_size(), self.rank());
        let index = bucket.index();
        // A run refuses what cannot shard before its first step (`Trainer::fit`); here the
        // contract is broken by the caller, and the sums would have nowhere to go.
        assert!(
            !members.is_empty(),
            "bucket {index}: sharded optimizer state updates every parameter from its slice's sums, and none was \
             lent"
        );
        assert!(
            bucket.lend_sharded(members, params, optimizer, grad_scale, shard.clone()),
            "bucket {index}: sharded optimizer state needs every parameter lent with its state (an element-wise \
             optimizer such as SGD or AdamW, and layers that expose their parameters' `Vec`s)"
        );
        if clip.is_some() || check_finite {
            bucket.await_clip(clip, check_finite, shard);
            // Reduce-scattered by the communication thread, which clips and checks them;
            // otherwise (one rank, no communication) the wait points clip.
            self.clip_due.set(self.gathers_shards());
        }
    }

    /// Asks for the step's clip after its last reduce-scatter, when its buckets await one: at
    /// the first all-gather launched for the next forward, or at the end of backward.
    pub(super) fn ask_for_clip(&self) {
        let Backend::Mpi(t) = &self.backend else { return };
        if !self.clip_due.replace(false) {
            return;
        }
        if self.mode.get() == CommMode::AfterBackward {
            self.held.borrow_mut().push(Held::ClipShards);
        } else {
            t.clip_shards();
        }
    }
}
