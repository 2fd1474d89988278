//! The step of sharded optimizer state (ZeRO-1) in the simulation: each bucket reduce-scattered
//! in backward, its shard (1/N of it) updated, and the updated shards all-gathered, either right
//! after each reduce-scatter or in the next forward, where each layer waits for the all-gathers
//! (`GatherGroup`s) of the parameters it is the first to read.

use super::{BucketTimes, Prediction, SimBucket, StepCosts};
use crate::gather_group::GatherGroup;
use crate::link::Link;

/// How a step keeps its optimizer state, as the simulation runs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SimSharding {
    /// Whole on every rank: each bucket all-reduced, all of it updated by every rank.
    #[default]
    Whole,
    /// Sharded, each bucket's all-gather right after its reduce-scatter, inside the step (as
    /// llm.c's `-z 1` and DeepSpeed's ZeRO-1 run them): for comparison.
    GatherHere,
    /// Sharded, the all-gathers launched after backward in forward order and each waited for in
    /// the next forward right before the first layer reading its bucket (what the generated code
    /// runs).
    GatherInForward,
}

impl SimBucket {
    /// Its reduce-scatter on `link` across `world` ranks: half its all-reduce (the conversions
    /// of a narrow format whole).
    pub fn reduce_scatter_seconds(&self, link: &Link, world: usize) -> f64 {
        if self.low_rank.is_some() {
            // Never sharded (refused): its two all-reduces.
            return self.comm_seconds(link, world);
        }
        link.ring_reduce_scatter_seconds(self.wire_bytes(), world) + self.conversion_seconds(world)
    }

    /// The all-gather of its updated parameters (FP32, whatever the gradients' format).
    pub fn all_gather_seconds(&self, link: &Link, world: usize) -> f64 {
        link.ring_all_gather_seconds(self.bytes, world)
    }
}

/// Simulates one step of `buckets` as `simulate` does, with the optimizer state kept as
/// `sharding` says; `gathers` (in launch order) are the all-gathers in forward.
///
/// In the steady state a `GatherInForward` step starts with the previous step's all-gathers
/// queued, in forward order, behind its last reduce-scatter, which that step waited for: so they
/// run from the step's start, one collective at a time, and the reduce-scatters of this step
/// queue behind them. Without overlap every collective runs after backward, the all-gathers
/// last, and the step waits for all of them.
pub fn simulate_sharded(
    buckets: &[SimBucket],
    gathers: &[GatherGroup],
    costs: &StepCosts,
    (link, world): (&Link, usize),
    overlap: bool,
    sharding: SimSharding,
) -> Prediction {
    if sharding == SimSharding::Whole || world <= 1 {
        return super::simulate(buckets, costs, link, world, overlap);
    }
    let mut comm_free = 0.0f64;
    let mut gather_end = vec![0.0f64; gathers.len()];
    let mut gather_s = 0.0;
    if sharding == SimSharding::GatherInForward && overlap {
        for (g, end) in gathers.iter().zip(&mut gather_end) {
            let seconds = link.ring_all_gather_seconds(g.bytes(), world);
            comm_free += seconds;
            gather_s += seconds;
            *end = comm_free;
        }
    }
    // Forward, each layer after the all-gathers of the parameters it is the first to read.
    let (mut t, mut gather_exposed_s) = (0.0f64, 0.0f64);
    for (i, &f) in costs.forward_s.iter().enumerate() {
        for (_, &end) in gathers.iter().zip(&gather_end).filter(|(g, _)| g.first_read == i) {
            if end > t {
                gather_exposed_s += end - t;
                t = end;
            }
        }
        t += f;
    }
    let forward_end = t;
    let forward_s: f64 = costs.forward_s.iter().sum();
    let first = buckets.iter().map(|b| b.launch_after).min().unwrap_or(0);
    let layers = costs.backward_s.len();
    let mut done = vec![forward_end; layers];
    for i in (first..layers).rev() {
        t += costs.backward_s[i];
        done[i] = t;
    }
    let backward_end = t;
    let times: Vec<BucketTimes> = buckets
        .iter()
        .map(|b| {
            let ready_s =
                if overlap { done.get(b.launch_after).copied().unwrap_or(backward_end) } else { backward_end };
            let start_s = ready_s.max(comm_free);
            let mut seconds = b.reduce_scatter_seconds(link, world);
            if sharding == SimSharding::GatherHere {
                seconds += b.all_gather_seconds(link, world);
            }
            comm_free = start_s + seconds;
            BucketTimes { ready_s, start_s, end_s: comm_free }
        })
        .collect();
    let (mut exposed_s, mut update_s) = (gather_exposed_s, 0.0);
    if !overlap {
        // Every reduce-scatter, then (in forward's place) every all-gather, before the updates.
        if sharding == SimSharding::GatherInForward {
            for g in gathers {
                let seconds = link.ring_all_gather_seconds(g.bytes(), world);
                comm_free += seconds;
                gather_s += seconds;
            }
        }
        t = backward_end.max(comm_free);
        exposed_s += t - backward_end;
    }
    for (b, times) in buckets.iter().zip(&times) {
        if times.end_s > t {
            exposed_s += times.end_s - t;
            t = times.end_s;
        }
        // Each rank updates its shard alone.
        let u = b.bytes as f64 / world as f64 * costs.update_s_per_byte;
        update_s += u;
        t += u;
    }
    Prediction {
        step_s: t,
        forward_s,
        backward_s: backward_end - forward_end,
        update_s,
        comm_s: times.iter().map(|b| b.end_s - b.start_s).sum::<f64>() + gather_s,
        exposed_s,
        all_gather_s: gather_s,
        gather_exposed_s,
        buckets: times,
    }
}
