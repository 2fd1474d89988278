//! Bucket boundaries chosen by the cost model instead of a size cap: the partition of the
//! layers (in backward order) into buckets that minimises the simulated step.
//!
//! Exact by exhaustive search up to `EXHAUSTIVE_LAYERS` layers with parameters; beyond, by a
//! dynamic program over the backward order inside a bisection on the step time (exact up to the
//! bisection's tolerance).
//! MG-WFBP's merge rule (Shi et al., INFOCOM 2019) is here as the reference heuristic.
//!
//! A `#[bucket_boundary]` layer keeps its promise here too: both planners choose boundaries only
//! within the runs of layers between forced ones. Candidates are simulated in the format the
//! gradients travel in (`grad_comm`): bf16 halves a bucket's bytes, PowerSGD sends factors.

use crate::bucket::{plan_buckets, PlanError};
use crate::limits::BucketLimits;
use crate::link::Link;
use crate::schedule::Schedule;
use crate::simulate::{simulate, Prediction, SimBucket, SimLowRank, StepCosts};
use crate::spec::{LayerSpec, ELEM_BYTES};
use crate::wire::{GradComm, WireFormat};

/// Largest count of layers with parameters searched exhaustively (2^(n-1) partitions).
pub const EXHAUSTIVE_LAYERS: usize = 16;

/// What to optimise for.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// Measured or FLOP-estimated seconds per layer, and the update's seconds per byte.
    pub costs: StepCosts,
    /// The interconnect between the ranks.
    pub link: Link,
    /// Ranks the gradients are reduced across.
    pub world: usize,
}

/// The layers with parameters, in definition order, their gradients as they travel, and where a
/// `#[bucket_boundary]` forces a bucket to start.
struct ParamLayers {
    index: Vec<usize>,
    /// `forced[s]`: param layers `s - 1` and `s` never share a bucket (`forced[0]` is unused).
    forced: Vec<bool>,
    grad_comm: GradComm,
    /// Prefix sums over param layers (`[s]`: layers `0..s`) of the FP32 bytes, and with PowerSGD
    /// of the bytes sent and of the matrices factorised, so that any bucket costs O(1) to build.
    bytes_before: Vec<usize>,
    low_rank_before: Vec<(usize, usize)>,
}

impl ParamLayers {
    fn of(layers: &[LayerSpec], grad_comm: GradComm) -> Self {
        let with: Vec<(usize, usize)> = layers
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.params.is_empty())
            .map(|(i, l)| {
                (i, l.params.iter().map(|p| p.numel().saturating_mul(ELEM_BYTES)).fold(0, usize::saturating_add))
            })
            .collect();
        let index: Vec<usize> = with.iter().map(|w| w.0).collect();
        let low_rank = |l: &LayerSpec| match grad_comm {
            GradComm::LowRank(r) => l.params.iter().fold((0, 0), |(sent, factorised), p| {
                let factorised_here = if r.matrix(&p.shape).is_some() { p.numel() * ELEM_BYTES } else { 0 };
                (sent + r.wire_values(&p.shape) * ELEM_BYTES, factorised + factorised_here)
            }),
            GradComm::Format(_) => (0, 0),
        };
        let prefix = |values: Vec<(usize, usize)>| {
            std::iter::once((0, 0)).chain(values.into_iter().scan((0, 0), |acc, (a, b)| {
                *acc = (acc.0 + a, acc.1 + b);
                Some(*acc)
            }))
        };
        let bytes_before = prefix(with.iter().map(|w| (w.1, 0)).collect()).map(|p| p.0).collect();
        let low_rank_before = prefix(index.iter().map(|&i| low_rank(&layers[i])).collect()).collect();
        // A boundary on layer `l` (with parameters or not) separates the param layers before `l`
        // from those from `l` on; one before the first or after the last separates nothing.
        let mut forced = vec![false; index.len()];
        for (l, _) in layers.iter().enumerate().filter(|(_, l)| l.bucket_boundary) {
            let s = index.partition_point(|&i| i < l);
            if s > 0 && s < index.len() {
                forced[s] = true;
            }
        }
        ParamLayers { index, forced, grad_comm, bytes_before, low_rank_before }
    }

    /// The bucket of param layers `s..end`, as its gradients travel.
    fn bucket(&self, s: usize, end: usize) -> SimBucket {
        let bytes = self.bytes_before[end] - self.bytes_before[s];
        let launch_after = self.index[s];
        match self.grad_comm {
            GradComm::Format(wire) => SimBucket { wire, ..SimBucket::fp32(bytes, launch_after) },
            GradComm::LowRank(_) => {
                let (to, from) = (self.low_rank_before[end], self.low_rank_before[s]);
                let low_rank = SimLowRank { wire_bytes: to.0 - from.0, factorised_bytes: to.1 - from.1 };
                SimBucket { wire: WireFormat::Fp32, low_rank: Some(low_rank), ..SimBucket::fp32(bytes, launch_after) }
            }
        }
    }

    /// The starts every plan has: 0 and the forced ones.
    fn forced_starts(&self) -> Vec<usize> {
        std::iter::once(0).chain((1..self.index.len()).filter(|&s| self.forced[s])).collect()
    }

    /// Buckets in launch order for buckets starting at the param-layer positions `starts`
    /// (ascending, beginning with 0).
    fn buckets(&self, starts: &[usize]) -> Vec<SimBucket> {
        let mut out: Vec<SimBucket> = starts
            .iter()
            .enumerate()
            .map(|(j, &s)| self.bucket(s, starts.get(j + 1).copied().unwrap_or(self.index.len())))
            .collect();
        out.reverse();
        out
    }
}

/// The boundaries (param-layer positions where a bucket starts) minimising the simulated step.
fn optimal_starts(p: &ParamLayers, t: &Target) -> Vec<usize> {
    if p.index.len() <= EXHAUSTIVE_LAYERS {
        exhaustive_starts(p, t)
    } else {
        fewer_buckets(p, t, dynamic_program_starts(p, t))
    }
}

/// `starts` with each boundary removed, one at a time, whose removal leaves the simulated step as
/// short: toward the exhaustive search's tie-break (fewer messages, fewer wait points), which the
/// dynamic program, keeping for each prefix the plan whose last all-reduce ends first, lacks. (One
/// at a time: where only two boundaries removed together keep the step, both stay.)
fn fewer_buckets(p: &ParamLayers, t: &Target, mut starts: Vec<usize>) -> Vec<usize> {
    let sim = |starts: &[usize]| simulate(&p.buckets(starts), &t.costs, &t.link, t.world, true).step_s;
    let mut step = sim(&starts);
    let mut k = 1;
    while k < starts.len() {
        if p.forced[starts[k]] {
            k += 1;
            continue;
        }
        let merged: Vec<usize> = starts.iter().enumerate().filter(|&(i, _)| i != k).map(|(_, &s)| s).collect();
        let merged_step = sim(&merged);
        if merged_step <= step + 1e-12 {
            (starts, step) = (merged, merged_step.min(step));
        } else {
            k += 1;
        }
    }
    starts
}

fn exhaustive_starts(p: &ParamLayers, t: &Target) -> Vec<usize> {
    let n = p.index.len();
    let forced_mask = (1..n).filter(|&i| p.forced[i]).fold(0u32, |m, i| m | 1 << (i - 1));
    {
        let mut best: Option<(f64, Vec<usize>)> = None;
        for mask in (0u32..(1 << (n - 1))).filter(|m| m & forced_mask == forced_mask) {
            let starts: Vec<usize> = std::iter::once(0).chain((1..n).filter(|i| mask & (1 << (i - 1)) != 0)).collect();
            let step = simulate(&p.buckets(&starts), &t.costs, &t.link, t.world, true).step_s;
            // Ties go to fewer buckets (fewer messages, fewer wait points).
            if best.as_ref().is_none_or(|(s, b)| step < *s - 1e-12 || (step <= *s + 1e-12 && starts.len() < b.len())) {
                best = Some((step, starts));
            }
        }
        best.map(|b| b.1).unwrap_or_else(|| p.forced_starts())
    }
}

fn dynamic_program_starts(p: &ParamLayers, t: &Target) -> Vec<usize> {
    // The simulated step is max(backward end + all updates, max over buckets k of (end of k's
    // all-reduce + the updates from k on)). For a bound T, the earliest possible end of the last
    // all-reduce over each backward prefix, using only buckets whose term stays within T, is a
    // dynamic program (an earlier end never hurts later buckets); the least feasible T is found
    // by bisection.
    let n = p.index.len();
    let ready = ready_times(p, &t.costs);
    // What follows each bucket's all-reduce on the compute thread, over backward positions 0..i:
    // the updates of its bytes, and PowerSGD's compression where it has one (both add up by layer).
    let rate = t.costs.update_s_per_byte;
    let mut after = vec![0f64; n + 1];
    for k in 0..n {
        let layer = p.bucket(n - 1 - k, n - k);
        after[k + 1] = after[k] + layer.bytes as f64 * rate + layer.compression_seconds();
    }
    let all_updates = after[n];
    let floor = ready[n - 1] + all_updates;
    // A bucket of backward positions i..=j crosses no forced boundary: i >= first[j].
    let mut first = vec![0usize; n];
    for j in 1..n {
        first[j] = if p.forced[n - j] { j } else { first[j - 1] };
    }
    let feasible = |bound: f64| -> Option<Vec<usize>> {
        let (mut end, mut from) = (vec![f64::INFINITY; n], vec![0usize; n]);
        for j in 0..n {
            // From the shortest bucket ending at j to the longest: its all-reduce and the updates
            // after it only grow, so once they alone pass the bound every longer one does too.
            // Among equal ends the longest bucket wins (`<=`), as fewer buckets are preferred.
            for i in (first[j]..=j).rev() {
                // Backward positions i..=j are param layers n-1-j ..= n-1-i.
                let comm = p.bucket(n - 1 - j, n - i).comm_seconds(&t.link, t.world);
                if ready[j] + comm + all_updates - after[i] > bound {
                    break;
                }
                let before = if i == 0 { 0.0 } else { end[i - 1] };
                let e = ready[j].max(before) + comm;
                if e + all_updates - after[i] <= bound && e <= end[j] {
                    (end[j], from[j]) = (e, i);
                }
            }
        }
        (end[n - 1].is_finite() && floor <= bound).then_some(from)
    };
    // The fewest buckets allowed: one per run between forced boundaries.
    let fewest = simulate(&p.buckets(&p.forced_starts()), &t.costs, &t.link, t.world, true).step_s;
    let (mut lo, mut hi) = (floor, fewest.max(floor));
    let mut best = feasible(hi * (1.0 + 1e-12));
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break; // the bound is exact to the last bit
        }
        match feasible(mid) {
            Some(from) => (best, hi) = (Some(from), mid),
            None => lo = mid,
        }
    }
    let Some(from) = best else { return p.forced_starts() };
    let mut cuts = Vec::new();
    let mut j = n;
    while j > 0 {
        let i = from[j - 1];
        cuts.push(n - j); // backward positions i..=j-1 are param layers n-j ..= n-1-i
        j = i;
    }
    cuts.sort_unstable();
    cuts
}

/// MG-WFBP's rule, walking backward: a layer's gradients join the open bucket when that bucket
/// could not have started its all-reduce before they were ready anyway (merging then saves a
/// message's latency and delays nothing), and no forced boundary lies between them.
fn mg_wfbp_starts(p: &ParamLayers, t: &Target) -> Vec<usize> {
    let n = p.index.len();
    let ready = ready_times(p, &t.costs);
    let mut comm_free = 0.0f64;
    // The open bucket: param layers from n-k (at backward position k) to `open_end`.
    let (mut open_end, mut open_ready) = (n, ready[0]);
    let mut starts = Vec::new();
    for (k, &next_ready) in ready.iter().enumerate().skip(1) {
        let could_start = open_ready.max(comm_free);
        if could_start < next_ready || p.forced[n - k] {
            comm_free = could_start + p.bucket(n - k, open_end).comm_seconds(&t.link, t.world);
            starts.push(n - k); // the open bucket began at param layer n-k
            open_end = n - k;
        }
        open_ready = next_ready;
    }
    starts.push(0);
    starts.sort_unstable();
    starts
}

/// When each param layer's gradients are ready, in backward order.
fn ready_times(p: &ParamLayers, costs: &StepCosts) -> Vec<f64> {
    let buckets: Vec<SimBucket> = p.index.iter().rev().map(|&i| SimBucket::fp32(0, i)).collect();
    let free = Link { latency_s: 0.0, bandwidth_bytes_per_s: f64::INFINITY };
    simulate(&buckets, costs, &free, 1, true).buckets.iter().map(|b| b.ready_s).collect()
}

/// How to choose boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Minimise the simulated step (exact up to `EXHAUSTIVE_LAYERS`).
    Optimal,
    /// MG-WFBP's merge rule.
    MgWfbp,
}

/// Plans `layers` with boundaries chosen by `strategy` for `target`, its gradients travelling as
/// `grad_comm` says; returns the schedule (the same shape as any other, in FP32: the caller
/// applies `grad_comm`) and its predicted step.
pub fn plan_auto(
    model: &str,
    layers: &[LayerSpec],
    target: &Target,
    strategy: Strategy,
    grad_comm: GradComm,
) -> Result<(Schedule, Prediction), PlanError> {
    let p = ParamLayers::of(layers, grad_comm);
    if p.index.is_empty() {
        return Err(PlanError::NoParameters);
    }
    let starts = match strategy {
        Strategy::Optimal => optimal_starts(&p, target),
        Strategy::MgWfbp => mg_wfbp_starts(&p, target),
    };
    let mut marked = layers.to_vec();
    for l in &mut marked {
        l.bucket_boundary = false;
    }
    for &s in &starts {
        marked[p.index[s]].bucket_boundary = true;
    }
    let schedule = plan_buckets(model, &marked, &BucketLimits::Unlimited)?;
    let prediction = simulate(&p.buckets(&starts), &target.costs, &target.link, target.world, true);
    Ok((forced_as_written(schedule, layers), prediction))
}

/// `schedule`, planned from `layers` with boundaries of the planner's own, recording as forced
/// only the boundaries `layers` forced: what a later plan of the same model must keep.
pub(crate) fn forced_as_written(mut schedule: Schedule, layers: &[LayerSpec]) -> Schedule {
    for (planned, written) in schedule.layers.to_mut().iter_mut().zip(layers) {
        planned.bucket_boundary = written.bucket_boundary;
    }
    schedule
}

#[cfg(test)]
mod tests;
