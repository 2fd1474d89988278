//! Gradient buckets: one flat buffer each, the parameters lent with it, and how its sums reach
//! them (the handle that owns a bucket while it is reduced: `in_flight`).
//!
//! Ownership is the wait point: `Communicator::all_reduce_async` moves a `GradBucket` into an
//! `InFlight` handle, which has no way to read the data; only `InFlight::wait` gives the bucket
//! back. Touching a gradient that is still being reduced therefore does not compile. The same
//! holds for parameters lent with a bucket (`lent`): they come back with it.

use overlap_plan::Schedule;

use super::lent::{BucketMember, Lent, ParamVecs};
use super::low_rank::state::LowRankState;
use super::wire::WireFormat;
use crate::error::{Error, Result};
use crate::optim::Optimizer;

/// One flat gradient buffer. Each parameter's gradient is a view at the offset the schedule
/// fixed at compile time; nothing is ever copied into or out of the bucket.
#[derive(Debug)]
pub struct GradBucket {
    index: usize,
    data: Vec<f32>,
    /// Parameters lent with the bucket, updated as it is summed (see `lent`).
    lent: Lent,
    /// How its all-reduce in progress sends the values (the communicator's choice at launch).
    wire: WireFormat,
    /// How the schedule it was made for sends them (`grad_comm`), unless the run chooses
    /// otherwise: the bucket's own, so that a model sends as it was compiled whichever model
    /// the communicator met last.
    planned: WireFormat,
    /// Whether the schedule it was made for shards the optimizer state
    /// (`#[distributed_model(shard_optimizer)]`), unless the run chooses otherwise: the bucket's
    /// own, as `planned`.
    sharded_by_schedule: bool,
    /// PowerSGD's state, when the schedule compresses this bucket (see `low_rank`).
    low_rank: Option<Box<LowRankState>>,
    /// All-reduced, or reduce-scattered with its lent parameters updated in this rank's shard
    /// alone (sharded optimizer state; see `lend_sharded`).
    sharding: Sharding,
    /// Clipping's part of the norm, measured on the communication thread as the sums arrive
    /// (see `measure_norm_on_arrival`).
    norm: ArrivalNorm,
}

/// A bucket's squared norm taken where its sums arrive, in cache, instead of on the compute
/// thread after the step's last wait point: the clip there then only adds the buckets' figures.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum ArrivalNorm {
    #[default]
    Unasked,
    Asked,
    Measured(f64),
}

/// How a bucket's sums reach the parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sharding {
    /// All-reduced: every rank has every sum (and updates every element it was lent).
    Whole,
    /// Reduce-scattered and updated in this rank's shard; the parameters' values stay on the
    /// communication thread for the all-gather the step launches for the next forward
    /// (`Communicator::launch_gather`), whose wait point gives them back.
    Sharded,
}

impl GradBucket {
    /// A zeroed bucket of `numel` elements; `index` is its position in launch order. It belongs
    /// to no schedule: FP32 on the wire (see `in_format`), and sharded only when the run
    /// chooses to (`CommConfig::shard_optimizer`); `planned` makes a model's bucket.
    pub fn zeros(index: usize, numel: usize) -> Self {
        GradBucket {
            index,
            data: crate::host::huge_pages::zeroed(numel),
            lent: Lent::default(),
            wire: WireFormat::Fp32,
            planned: WireFormat::Fp32,
            sharded_by_schedule: false,
            low_rank: None,
            sharding: Sharding::Whole,
            norm: ArrivalNorm::default(),
        }
    }

    /// Bucket `k` of `schedule`, zeroed, in the schedule's wire format and sharding, with
    /// PowerSGD's state when the schedule compresses it (`grad_comm = powersgd(..)`; see
    /// `low_rank`).
    pub fn planned(schedule: &Schedule, k: usize) -> Self {
        let info = &schedule.buckets[k];
        let mut bucket = GradBucket::zeros(k, info.numel).in_format(info.wire);
        bucket.low_rank = info.low_rank.map(|spec| Box::new(LowRankState::new(schedule, k, spec)));
        bucket.sharded_by_schedule = schedule.shard_optimizer;
        bucket
    }

    /// This bucket, sent in `format` unless the run chooses another (`CommConfig::grad_comm`);
    /// FP32 for a bucket made by `zeros`.
    pub fn in_format(mut self, format: WireFormat) -> Self {
        self.planned = format;
        self
    }

    /// A bucket holding `data` (a message of PowerSGD's factors), without copying it.
    pub(crate) fn from_vec(index: usize, data: Vec<f32>) -> Self {
        GradBucket {
            index,
            data,
            lent: Lent::default(),
            wire: WireFormat::Fp32,
            planned: WireFormat::Fp32,
            sharded_by_schedule: false,
            low_rank: None,
            sharding: Sharding::Whole,
            norm: ArrivalNorm::default(),
        }
    }

    /// The values, without copying them.
    pub(crate) fn into_vec(self) -> Vec<f32> {
        self.data
    }

    /// PowerSGD's state, the gradients it works on and the parameters lent with them, for a
    /// low-rank bucket.
    pub(crate) fn low_rank_parts(&mut self) -> Option<(&mut LowRankState, &mut [f32], &mut Lent)> {
        self.low_rank.as_deref_mut().map(|state| (state, &mut self.data[..], &mut self.lent))
    }

    /// PowerSGD's state (error feedback, warm-start Q), for checkpoints; `None` for a bucket
    /// sent as it is.
    pub fn low_rank_state(&self) -> Option<&LowRankState> {
        self.low_rank.as_deref()
    }

    /// As `low_rank_state`, mutably: a resumed run restores the state from its checkpoint.
    pub fn low_rank_state_mut(&mut self) -> Option<&mut LowRankState> {
        self.low_rank.as_deref_mut()
    }

    /// Lends this bucket's parameters, `members` (out of `params`), and their optimizer state
    /// (out of `optimizer`) to its all-reduce, which then updates them as it sums the gradients;
    /// nothing is lent, and `false` returned, when the model or the optimizer cannot lend all of
    /// them. After the wait point, [`GradBucket::give_back_updated`] returns them.
    pub fn lend_for_update<P: ParamVecs, O: Optimizer>(
        &mut self,
        members: &[BucketMember],
        params: &mut P,
        optimizer: &mut O,
        grad_scale: f32,
    ) -> bool {
        self.lent.lend(members, params, optimizer, grad_scale, None)
    }

    /// Lends as `lend_for_update`, with optimizer state for `shard` (this rank's elements of the
    /// bucket) alone, and marks the bucket to be reduce-scattered, its shard updated and the
    /// updated values kept for the all-gather the step launches for the next forward. `false`,
    /// and nothing lent, when the model or the optimizer cannot lend every parameter.
    pub(crate) fn lend_sharded<P: ParamVecs, O: Optimizer>(
        &mut self,
        members: &[BucketMember],
        params: &mut P,
        optimizer: &mut O,
        grad_scale: f32,
        shard: std::ops::Range<usize>,
    ) -> bool {
        let lent = self.lent.lend(members, params, optimizer, grad_scale, Some(shard));
        self.sharding = if lent { Sharding::Sharded } else { Sharding::Whole };
        lent
    }

    /// Defers the update of the lent shard until the step's global gradient norm is known, to
    /// clip by it or to check it (see `Lent::await_clip`).
    pub(crate) fn await_clip(
        &mut self,
        clip: Option<crate::optim::GradClip>,
        check_finite: bool,
        shard: std::ops::Range<usize>,
    ) {
        self.lent.await_clip(clip, check_finite, shard);
    }

    /// This bucket's part of the squared gradient norm (of its sums, unscaled): its kept shard's
    /// when its update awaits the clip, else all of its gradients.
    pub(crate) fn clip_sum_of_squares(&self) -> f64 {
        if self.lent.awaits_clip() {
            self.lent.stashed_sum_of_squares()
        } else if let ArrivalNorm::Measured(measured) = self.norm {
            measured
        } else {
            crate::optim::sum_of_squares(&self.data)
        }
    }

    /// Asks the communication thread to measure the sums' squared norm as they arrive (the run
    /// clips, and nothing is lent: the update waits for the global norm).
    pub(crate) fn measure_norm_on_arrival(&mut self) {
        self.norm = ArrivalNorm::Asked;
    }

    /// On the communication thread, once the sums are in `data`: measures them when asked. The
    /// same function over the same floats as `clip_sum_of_squares` would run, so the same value.
    pub(crate) fn arrived(&mut self) {
        if self.norm == ArrivalNorm::Asked && self.lent.is_empty() {
            self.norm = ArrivalNorm::Measured(crate::optim::sum_of_squares(&self.data));
        }
    }

    /// Whether the lent shard's update awaits the step's global norm.
    pub(crate) fn awaits_clip(&self) -> bool {
        self.lent.awaits_clip()
    }

    /// Updates the lent shard, if it awaits the clip, from the squared global norm (see
    /// `Lent::apply_clipped`).
    pub(crate) fn apply_clipped(&mut self, sum_of_squares: f64) {
        self.lent.apply_clipped(sum_of_squares);
    }

    /// The global norm the communication thread's clip measured for this step, if it updated
    /// this bucket.
    pub(crate) fn clipped_norm(&self) -> Option<f32> {
        self.lent.clipped_norm()
    }

    /// How this bucket's sums reach the parameters (see `lend_sharded`).
    pub(crate) fn sharding(&self) -> Sharding {
        self.sharding
    }

    /// Gives the lent parameters, now updated, back to `params` and their state to `optimizer`;
    /// `false` when nothing was lent, and the update is still to do. An error, giving nothing,
    /// when `params` did not lend them: the buckets came from another model's `backward`.
    pub fn give_back_updated<P: ParamVecs, O: Optimizer>(&mut self, params: &mut P, optimizer: &mut O) -> Result<bool> {
        if self.lent.is_empty() {
            return Ok(false);
        }
        if !self.lent.lent_by(params) {
            return Err(Error::Config(format!(
                "bucket b{} carries another model's parameters: `step` takes back the buckets that this model's \
                 `backward` returned",
                self.index
            )));
        }
        self.lent.give_back(params, optimizer);
        self.sharding = Sharding::Whole;
        Ok(true)
    }

    /// The parameters lent with it (what the wait point checks and times).
    pub(super) fn lent(&self) -> &Lent {
        &self.lent
    }

    /// The gradients and the parameters lent with them, for the all-reduce that updates them.
    pub(crate) fn data_and_lent(&mut self) -> (&mut [f32], &mut Lent) {
        (&mut self.data, &mut self.lent)
    }

    /// The format its values travel in, set by the communicator when it launches the all-reduce.
    pub(crate) fn wire_format(&self) -> WireFormat {
        self.wire
    }

    pub(crate) fn set_wire_format(&mut self, format: WireFormat) {
        self.wire = format;
    }

    /// The format its schedule sends it in (see `in_format`).
    pub(crate) fn planned_wire_format(&self) -> WireFormat {
        self.planned
    }

    /// Whether its schedule shards the optimizer state (see `sharded_by_schedule`).
    pub(crate) fn sharded_by_schedule(&self) -> bool {
        self.sharded_by_schedule
    }

    /// Updates the lent parameters from this bucket's own gradients, when they are already the
    /// sums (one rank, or no reduction at all), and clears them; nothing when nothing is lent.
    /// On the compute thread: timed as the optimizer's, as the updates after a wait point are.
    pub(crate) fn update_lent_and_clear(&mut self) {
        let _update = crate::trace::recorder::update(self.index);
        self.lent.update_and_clear(&mut self.data);
    }

    /// Sets every gradient to zero, as the next step expects (see `Layer::backward`). `step`
    /// calls it after an update that ran after the wait point; lent updates clear as they go.
    pub fn clear(&mut self) {
        self.data.fill(0.0);
        self.norm = ArrivalNorm::default();
        // A low-rank bucket starts the next step from this rank's errors (see `low_rank`).
        if let Some(state) = self.low_rank.as_deref_mut() {
            state.restore_aside(&mut self.data);
        }
    }

    /// Its position in launch order.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Its length in elements (`numel` of its `BucketInfo`).
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The whole buffer, every member's gradient at its offset.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// The whole buffer, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.data
    }

    /// The gradient at `offset..offset + len`.
    pub fn view(&self, offset: usize, len: usize) -> &[f32] {
        &self.data[offset..offset + len]
    }

    /// Disjoint mutable views, one per `(offset, len)`, which must be in ascending, non-overlapping
    /// order (the macro emits them from the schedule, which guarantees it).
    pub fn views_mut<const N: usize>(&mut self, ranges: [(usize, usize); N]) -> [&mut [f32]; N] {
        let mut rest: &mut [f32] = &mut self.data;
        let mut consumed = 0;
        ranges.map(|(offset, len)| {
            assert!(offset >= consumed, "bucket views must be ascending and disjoint");
            let tail = std::mem::take(&mut rest);
            let (_, tail) = tail.split_at_mut(offset - consumed);
            let (view, tail) = tail.split_at_mut(len);
            rest = tail;
            consumed = offset + len;
            view
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_are_disjoint_slices_at_their_offsets() {
        let mut b = GradBucket::zeros(0, 10);
        let [a, c] = b.views_mut([(1, 2), (5, 3)]);
        a.fill(1.0);
        c.fill(2.0);
        assert_eq!(b.as_slice(), &[0.0, 1.0, 1.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0, 0.0]);
        assert_eq!(b.view(5, 3), &[2.0; 3]);
    }

    #[test]
    fn the_norm_taken_on_arrival_is_the_one_the_clip_would_take_and_lasts_one_step() {
        let mut b = GradBucket::zeros(0, 5);
        b.views_mut([(0, 5)])[0].copy_from_slice(&[3.0, -4.0, 0.5, 1e-3, 2.0]);
        let direct = crate::optim::sum_of_squares(b.as_slice());
        b.arrived();
        assert_eq!(b.norm, ArrivalNorm::Unasked, "measured unasked");
        b.measure_norm_on_arrival();
        b.arrived();
        assert_eq!(b.norm, ArrivalNorm::Measured(direct));
        // The clip reads the figure, not the data: changed data would show a stale one.
        b.views_mut([(0, 1)])[0][0] = 30.0;
        assert_eq!(b.clip_sum_of_squares().to_bits(), direct.to_bits());
        b.clear();
        assert_eq!(b.norm, ArrivalNorm::Unasked, "the next step measures afresh");
        assert_eq!(b.clip_sum_of_squares(), 0.0);
    }

    #[test]
    #[should_panic(expected = "ascending and disjoint")]
    fn overlapping_views_are_refused() {
        let mut b = GradBucket::zeros(0, 10);
        let _ = b.views_mut([(2, 4), (3, 1)]);
    }
}
