//! Parameters lent with a bucket, so that their update runs as the bucket is summed.
//!
//! SGD and AdamW update each value from its own summed gradient and state alone. When a bucket is
//! launched, its parameters' `Vec`s (taken out of the layers) and their optimizer state (taken
//! out of the optimizer) travel with it; the communication thread updates each chunk as soon as
//! its sum is known, reading the sums where the all-reduce left them, in cache, instead of
//! writing them back to the bucket for the compute thread to read again after the wait point.
//! The wait point gives everything back, and the bucket comes back cleared: its gradients were
//! read for the last time here. Ownership moves, so nothing is shared: a bucket never
//! waited for keeps its parameters, and the model's forward says so.
//!
//! The generated code says which parameters a bucket holds (`BucketMember`s, from the compiled
//! schedule) and lends them out of the model through `ParamVecs`, so lending needs nothing else
//! of the model.

use std::ops::Range;
use std::time::{Duration, Instant};

use overlap_plan::owned_part;

use crate::optim::{sum_of_squares, GradClip, LentState, Optimizer};

/// Where lent parameters come from and go back to: the `Vec` holding each of the model's
/// parameters, by its index in definition order. `#[distributed_model]` implements it.
pub trait ParamVecs {
    /// The `Vec` of parameter `index`, when its layer exposes it (`Layer::param_vec_mut`).
    fn param_vec_mut(&mut self, index: usize) -> Option<&mut Vec<f32>>;
}

/// One parameter of a bucket, as the generated code hands it over from the schedule
/// (`ParamInfo`): its index in definition order, which addresses it in the optimizer and in
/// `ParamVecs`, and where its gradient starts in the bucket, in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketMember {
    /// Its index among the model's parameters in definition order.
    pub index: usize,
    /// Where its gradient starts in the bucket, in elements.
    pub offset: usize,
}

/// Elements updated, then cleared, at a time by `update_and_clear`: 64 KiB, well inside a core's
/// L2 cache.
const CLEAR_BLOCK: usize = 1 << 14;

/// One lent parameter's values and where its gradient starts in the bucket.
#[derive(Debug)]
struct LentValue {
    /// Its index in definition order (the optimizer's and `ParamVecs`').
    index: usize,
    /// Where its gradient starts in the bucket.
    offset: usize,
    value: Vec<f32>,
}

/// One lent parameter's optimizer state.
#[derive(Debug)]
struct LentStateOf {
    /// The parameter's index in definition order.
    index: usize,
    /// The elements this rank updates, of the parameter's own: all of them, or with sharded
    /// optimizer state the part inside this rank's shard of the bucket, which is all the state
    /// covers (its element 0 is the parameter's element `owned.start`).
    owned: Range<usize>,
    state: LentState,
}

/// The values of the parameters lent with one bucket, addressed by the bucket's elements: what
/// an all-gather reads (this rank's shard) and writes (the others'). They travel on to the
/// all-gather in the next forward without their state, and its wait point gives them back
/// (`give_back`).
#[derive(Debug, Default)]
pub(crate) struct ParamValues {
    params: Vec<LentValue>,
}

impl ParamValues {
    /// Copies the values at `range` of the bucket into `out` (`range.len()` long): what an
    /// all-gather sends of this rank's updated shard.
    pub(crate) fn read_values(&self, range: Range<usize>, out: &mut [f32]) {
        for p in &self.params {
            if let Some((own, at)) = overlap(p, &range) {
                out[at].copy_from_slice(&p.value[own]);
            }
        }
    }

    /// Sets the values at `range` of the bucket from `values`: another rank's updated shard, as
    /// an all-gather brings it.
    pub(crate) fn write_values(&mut self, range: Range<usize>, values: &[f32]) {
        for p in &mut self.params {
            if let Some((own, at)) = overlap(p, &range) {
                p.value[own].copy_from_slice(&values[at]);
            }
        }
    }

    /// Takes out the parameters whose elements start in `range` of the bucket (an all-gather
    /// group's, which holds whole parameters).
    pub(crate) fn split_off(&mut self, range: Range<usize>) -> ParamValues {
        let (inside, outside) = std::mem::take(&mut self.params).into_iter().partition(|p| range.contains(&p.offset));
        self.params = outside;
        ParamValues { params: inside }
    }

    /// Whether no parameter is left.
    pub(crate) fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// Whether these are parameters `params` lent: each of its slots is there and empty,
    /// awaiting them. Another model's parameters are not.
    pub(crate) fn awaited_by<P: ParamVecs>(&self, params: &mut P) -> bool {
        self.params.iter().all(|p| params.param_vec_mut(p.index).is_some_and(|value| value.is_empty()))
    }

    /// Puts every parameter back into `params`.
    pub(crate) fn give_back<P: ParamVecs>(&mut self, params: &mut P) {
        for p in self.params.drain(..) {
            let Some(value) = params.param_vec_mut(p.index) else {
                panic!("parameter {} was lent, so it can be given back", p.index);
            };
            *value = p.value;
        }
    }
}

/// The part of `range` of the bucket that parameter `p` covers: as its own elements, and as
/// positions in `range`.
fn overlap(p: &LentValue, range: &Range<usize>) -> Option<(Range<usize>, Range<usize>)> {
    let (start, end) = (p.offset.max(range.start), (p.offset + p.value.len()).min(range.end));
    (start < end).then(|| (start - p.offset..end - p.offset, start - range.start..end - range.start))
}

/// The parameters lent with one bucket and their state; empty when its update runs after the
/// wait point. The vectors are kept from step to step, so lending allocates nothing after the
/// first step (but when the values go on to an all-gather in the next forward).
#[derive(Debug, Default)]
pub(crate) struct Lent {
    values: ParamValues,
    states: Vec<LentStateOf>,
    grad_scale: f32,
    /// With sharded state, clipping or the finiteness check: the shard's sums, kept until the
    /// global norm is known.
    stash: Stash,
    /// Time spent in `update` since the last `lend`: the report tells the transfer's time from
    /// the updates' within an all-reduce.
    updating: Duration,
}

/// A sharded bucket's sums while its update waits for the step's global gradient norm (for
/// clipping, and for the finiteness check: the norm is finite exactly when every sum is): each
/// rank holds only its shard's sums, so the norm is the sum over ranks of every shard's squares,
/// one scalar all-reduce after the last reduce-scatter (`Lent::apply_clipped`). The vector is
/// kept from step to step.
#[derive(Debug, Default)]
struct Stash {
    /// Whether the update waits for the norm.
    deferred: bool,
    /// The clipping threshold and, once applied, the norm it measured.
    clip: Option<GradClip>,
    /// Whether a non-finite sum stops the step (`CommConfig::check_finite`).
    check_finite: bool,
    applied: bool,
    /// The first non-finite sum over every rank and bucket (bucket, element, value), when the
    /// check found one: the update did not run.
    non_finite: Option<(usize, usize, f32)>,
    /// The bucket's elements whose sums are kept: this rank's shard.
    shard: Range<usize>,
    sums: Vec<f32>,
}

impl Lent {
    pub(crate) fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// Takes the bucket's parameters, `members`, out of `params` and their state out of
    /// `optimizer`, when every one of them can be lent; otherwise lends nothing and returns
    /// `false`. With `shard` (elements of the bucket), each parameter lends only the state of its
    /// part inside it, and only that part is updated here (sharded optimizer state).
    pub(crate) fn lend<P: ParamVecs, O: Optimizer>(
        &mut self,
        members: &[BucketMember],
        params: &mut P,
        optimizer: &mut O,
        grad_scale: f32,
        shard: Option<Range<usize>>,
    ) -> bool {
        debug_assert!(self.is_empty(), "the bucket already has parameters lent");
        (self.grad_scale, self.updating) = (grad_scale, Duration::ZERO);
        for &BucketMember { index, offset } in members {
            let Some(value) = params.param_vec_mut(index) else {
                self.give_back(params, optimizer);
                return false;
            };
            let value = std::mem::take(value);
            let owned = shard.as_ref().map_or(0..value.len(), |shard| owned_part(offset, value.len(), shard));
            let Some(state) = optimizer.lend(index, owned.len()) else {
                *params.param_vec_mut(index).expect("lent a moment ago") = value;
                self.give_back(params, optimizer);
                return false;
            };
            self.values.params.push(LentValue { index, offset, value });
            self.states.push(LentStateOf { index, owned, state });
        }
        true
    }

    /// Defers the update of `shard` (the state lent covers) until the step's global gradient
    /// norm is known, to clip by it (`clip`) or to check it (`check_finite`): `update` keeps the
    /// sums instead, and `apply_clipped` updates from them.
    pub(crate) fn await_clip(&mut self, clip: Option<GradClip>, check_finite: bool, shard: Range<usize>) {
        let stash = &mut self.stash;
        stash.sums.clear();
        stash.sums.resize(shard.len(), 0.0);
        (stash.deferred, stash.clip, stash.check_finite, stash.applied) = (true, clip, check_finite, false);
        (stash.non_finite, stash.shard) = (None, shard);
    }

    /// Whether the update waits for the global norm (`await_clip`, not yet `apply_clipped`).
    pub(crate) fn awaits_clip(&self) -> bool {
        self.stash.deferred && !self.stash.applied
    }

    /// Whether a non-finite norm stops the step rather than reach the update.
    pub(crate) fn checks_finite(&self) -> bool {
        self.stash.check_finite
    }

    /// The first non-finite kept sum: its element of the bucket, and its value.
    pub(crate) fn first_non_finite(&self) -> Option<(usize, f32)> {
        let at = self.stash.sums.iter().position(|s| !s.is_finite())?;
        Some((self.stash.shard.start + at, self.stash.sums[at]))
    }

    /// Skips the update: the check found `found` (bucket, element, value), on some rank.
    pub(crate) fn refuse_non_finite(&mut self, found: (usize, usize, f32)) {
        (self.stash.applied, self.stash.non_finite) = (true, Some(found));
    }

    /// What the finiteness check found, when it stopped the update.
    pub(crate) fn non_finite(&self) -> Option<(usize, usize, f32)> {
        self.stash.non_finite
    }

    /// The sum of squares of the kept sums, in f64: this rank's part of the squared norm.
    pub(crate) fn stashed_sum_of_squares(&self) -> f64 {
        sum_of_squares(&self.stash.sums)
    }

    /// Updates the shard from the kept sums, scaled by the clipping factor of the global norm
    /// whose square (of the sums, over every bucket and rank) is `sum_of_squares`.
    pub(crate) fn apply_clipped(&mut self, sum_of_squares: f64) {
        if !self.awaits_clip() {
            return;
        }
        if let Some(clip) = self.stash.clip.as_mut() {
            self.grad_scale = clip.scale(sum_of_squares, self.grad_scale);
        }
        self.stash.applied = true;
        let sums = std::mem::take(&mut self.stash.sums);
        // After the reduce-scatter's span: not part of its time.
        self.update_untimed(self.stash.shard.clone(), &sums);
        self.stash.sums = sums;
    }

    /// The global norm `apply_clipped` measured, for the optimizer's record of it.
    pub(crate) fn clipped_norm(&self) -> Option<f32> {
        self.stash
            .clip
            .filter(|_| self.stash.applied && self.stash.non_finite.is_none())
            .and_then(|clip| clip.last_norm())
    }

    /// Updates the parameters' elements whose gradients sit at `range` of the bucket, from their
    /// sums over all ranks, `sums` (`range.len()` long); keeps the sums of the shard instead
    /// while the update awaits the global norm.
    pub(crate) fn update(&mut self, range: Range<usize>, sums: &[f32]) {
        let started = Instant::now();
        self.update_untimed(range, sums);
        self.updating += started.elapsed();
    }

    /// Time spent updating since the parameters were lent.
    pub(crate) fn updating(&self) -> Duration {
        self.updating
    }

    /// `update`, for a caller whose own span covers the work (PowerSGD's decompression, one row
    /// at a time): no clock read per call.
    pub(crate) fn update_untimed(&mut self, range: Range<usize>, sums: &[f32]) {
        debug_assert_eq!(range.len(), sums.len());
        if self.awaits_clip() {
            let shard = &self.stash.shard;
            let (start, end) = (shard.start.max(range.start), shard.end.min(range.end));
            if start < end {
                self.stash.sums[start - shard.start..end - shard.start]
                    .copy_from_slice(&sums[start - range.start..end - range.start]);
            }
            return;
        }
        debug_assert_eq!(self.values.params.len(), self.states.len(), "the values went on without their state");
        for (p, s) in self.values.params.iter_mut().zip(&mut self.states) {
            let (owned_start, owned_end) = (p.offset + s.owned.start, p.offset + s.owned.end);
            let (start, end) = (owned_start.max(range.start), owned_end.min(range.end));
            if start < end {
                let own = start - p.offset..end - p.offset;
                let grad = &sums[start - range.start..end - range.start];
                let state = own.start - s.owned.start..own.end - s.owned.start;
                s.state.apply(state, &mut p.value[own], grad, self.grad_scale);
            }
        }
    }

    /// Takes the values out, to go on to an all-gather in the next forward; their state stays
    /// and goes back to the optimizer with the bucket (`give_back`).
    pub(crate) fn take_values(&mut self) -> ParamValues {
        std::mem::take(&mut self.values)
    }

    /// Updates the lent parameters from sums that fill the whole bucket, `sums`, and clears them
    /// for the next step (see `Layer::backward`): block by block, each cleared while still in
    /// cache. Does nothing when nothing is lent: the sums are then for the update after the
    /// wait point.
    pub(crate) fn update_and_clear(&mut self, sums: &mut [f32]) {
        if self.is_empty() {
            return;
        }
        for (k, block) in sums.chunks_mut(CLEAR_BLOCK).enumerate() {
            let start = k * CLEAR_BLOCK;
            self.update(start..start + block.len(), block);
            block.fill(0.0);
        }
    }

    /// Whether `params` lent the parameters still here: each of its slots awaits them (empty).
    /// Another model's are not (a `step` given another model's buckets).
    pub(crate) fn lent_by<P: ParamVecs>(&self, params: &mut P) -> bool {
        self.values.awaited_by(params)
    }

    /// Puts every lent parameter still here back into `params` and every state into
    /// `optimizer`. Values taken on to an all-gather (`take_values`) come back at its wait
    /// point; until then those parameters stay empty.
    pub(crate) fn give_back<P: ParamVecs, O: Optimizer>(&mut self, params: &mut P, optimizer: &mut O) {
        (self.stash.deferred, self.stash.clip) = (false, None);
        self.values.give_back(params);
        for s in self.states.drain(..) {
            optimizer.give_back(s.index, s.state);
        }
    }
}
