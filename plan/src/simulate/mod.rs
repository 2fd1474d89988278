//! A discrete-event simulation of one training step for a given bucket plan: when each bucket's
//! gradients are ready, when its all-reduce (or, with sharded optimizer state, its
//! reduce-scatter, and its all-gather in the next forward) starts (one collective at a time, in
//! launch order) and ends, when each wait point returns; hence the predicted step time and
//! exposed communication.

mod sharded;
#[cfg(test)]
mod sharded_tests;

use crate::gather_group::GatherGroup;
use crate::link::Link;
use crate::schedule::Schedule;
use crate::spec::ELEM_BYTES;
use crate::wire::WireFormat;

/// Seconds each layer takes (by layer index, definition order) and the optimizer's cost.
#[derive(Clone, Debug, PartialEq)]
pub struct StepCosts {
    /// Seconds of each layer's forward, by layer index.
    pub forward_s: Vec<f64>,
    /// Seconds of each layer's backward, by layer index.
    pub backward_s: Vec<f64>,
    /// Optimizer update time per byte of gradients (the update streams parameters, gradients
    /// and state through memory, so it scales with size).
    pub update_s_per_byte: f64,
}

/// Optimizer update throughput assumed when nothing was measured: SGD with momentum streams
/// about five f32 values per parameter at roughly 10 GB/s on one core.
pub const DEFAULT_UPDATE_S_PER_BYTE: f64 = 5.0 / 10e9;

/// The most ranks a cluster may be simulated or planned for (2^24): `world =`, `--simulate` and a
/// profile's `world_size` all stop there.
pub const MAX_WORLD: usize = 1 << 24;

impl StepCosts {
    /// Times from FLOPs: forward = FLOPs per sample × batch / rate; backward twice that (a
    /// linear layer's backward is two products of the forward's size).
    pub fn from_flops(flops_per_sample: impl Iterator<Item = u64>, batch: usize, flops_per_s: f64) -> Self {
        let forward_s: Vec<f64> = flops_per_sample.map(|f| f as f64 * batch as f64 / flops_per_s).collect();
        let backward_s = forward_s.iter().map(|f| 2.0 * f).collect();
        StepCosts { forward_s, backward_s, update_s_per_byte: DEFAULT_UPDATE_S_PER_BYTE }
    }
}

/// Seconds per FP32 gradient byte that narrowing to bf16 / fp16 and widening back add to a
/// bucket's reduction (measured: the 38 MiB of `mlp` through shared memory on 2 ranks took
/// 5.3 ms narrowed against 3.5 ms in FP32 on one core; the difference over 40 MB).
pub const NARROWING_S_PER_BYTE: f64 = 4.5e-11;

/// Seconds per FP32 byte of factorised matrices that PowerSGD's compression adds on the
/// compute thread: P = M·Q, Q = Mᵀ·P, and M̂ with the new error, four passes over the matrices
/// (the update is counted as for every bucket). Measured on `mlp`'s 40 MB on 2 ranks: the eight
/// passes of a compressed step, update included, take about 27 ms (docs/performance.md); half
/// of them, 13.5 ms over 40 MB.
pub const LOW_RANK_S_PER_BYTE: f64 = 3.4e-10;

/// One bucket as the simulation sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimBucket {
    /// Its FP32 gradients' bytes (what the update streams).
    pub bytes: usize,
    /// The format it travels in: the link carries `bytes` scaled to it.
    pub wire: WireFormat,
    /// Index of the layer whose backward completes it.
    pub launch_after: usize,
    /// PowerSGD: sent as two all-reduces of factors (and the values sent whole).
    pub low_rank: Option<SimLowRank>,
}

/// What PowerSGD changes about a bucket's step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimLowRank {
    /// Bytes one rank sends in its two all-reduces together.
    pub wire_bytes: usize,
    /// FP32 bytes of the matrices it factorises (what the compression streams).
    pub factorised_bytes: usize,
}

/// The buckets of a compiled schedule, in launch order.
pub fn sim_buckets(schedule: &Schedule) -> Vec<SimBucket> {
    schedule
        .buckets
        .iter()
        .enumerate()
        .map(|(k, b)| SimBucket {
            bytes: b.bytes(),
            wire: b.wire,
            launch_after: b.launch_after,
            low_rank: b.low_rank.map(|l| SimLowRank {
                wire_bytes: schedule.wire_bytes(k),
                factorised_bytes: b
                    .params
                    .iter()
                    .map(|&r| &schedule.param(r).shape)
                    .filter(|shape| l.matrix(shape).is_some())
                    .map(|shape| shape.iter().product::<usize>() * ELEM_BYTES)
                    .sum(),
            }),
        })
        .collect()
}

impl SimBucket {
    /// An FP32 bucket of `bytes`.
    pub fn fp32(bytes: usize, launch_after: usize) -> Self {
        SimBucket { bytes, wire: WireFormat::Fp32, launch_after, low_rank: None }
    }

    /// The compute PowerSGD adds to the step (none without it).
    pub fn compression_seconds(&self) -> f64 {
        self.low_rank.map_or(0.0, |l| l.factorised_bytes as f64 * LOW_RANK_S_PER_BYTE)
    }

    /// Its all-reduce on `link` across `world` ranks: the narrow bytes on the link, plus the
    /// conversions when it narrows (none with one rank: nothing is sent).
    pub fn comm_seconds(&self, link: &Link, world: usize) -> f64 {
        if let Some(l) = self.low_rank {
            // P (with the values sent whole), then Q: two collectives, each paying the latency.
            let p = l.wire_bytes / 2;
            return link.ring_all_reduce_seconds(p, world) + link.ring_all_reduce_seconds(l.wire_bytes - p, world);
        }
        link.ring_all_reduce_seconds(self.wire_bytes(), world) + self.conversion_seconds(world)
    }

    /// The bytes of its gradients in the format they travel in.
    fn wire_bytes(&self) -> usize {
        match self.wire {
            WireFormat::Fp32 => self.bytes,
            narrow => self.bytes / ELEM_BYTES * narrow.bytes_per_value(),
        }
    }

    /// Narrowing its gradients and widening the sums back (none in FP32, or with one rank).
    fn conversion_seconds(&self, world: usize) -> f64 {
        if self.wire != WireFormat::Fp32 && world > 1 {
            self.bytes as f64 * NARROWING_S_PER_BYTE
        } else {
            0.0
        }
    }
}

/// When one bucket's all-reduce ran, in seconds from the start of the step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BucketTimes {
    /// When backward had made all its gradients ready (the end of backward without overlap).
    pub ready_s: f64,
    /// When its collective started: ready, and the link free of the collectives before it (the
    /// all-gathers in forward included).
    pub start_s: f64,
    /// When its collective ended (with `GatherHere`, its all-gather's end).
    pub end_s: f64,
}

/// The simulated step of one bucket plan: its phases, its communication and what of it the compute
/// thread waited for, in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// The whole step: forward, backward, updates and the waits between them.
    pub step_s: f64,
    /// The layers' forward times summed (waits for all-gathers not included: see
    /// `gather_exposed_s`).
    pub forward_s: f64,
    /// From the end of forward to the end of the backward of the first layer with parameters.
    pub backward_s: f64,
    /// The optimizer's updates summed, with PowerSGD's compression when it is used.
    pub update_s: f64,
    /// Sum of the all-reduce times.
    pub comm_s: f64,
    /// Time the compute thread waits in wait points (the all-gathers' in forward included).
    pub exposed_s: f64,
    /// Sum of the all-gathers' times when they run in forward (part of `comm_s`).
    pub all_gather_s: f64,
    /// The forward's time waiting for them (part of `exposed_s`).
    pub gather_exposed_s: f64,
    /// When each bucket's collective ran, in launch order.
    pub buckets: Vec<BucketTimes>,
}

impl Prediction {
    /// Seconds of compute alone: forward, backward and updates, without any wait.
    pub fn compute_s(&self) -> f64 {
        self.forward_s + self.backward_s + self.update_s
    }

    /// Weak-scaling efficiency: the step without any communication over the predicted step.
    pub fn efficiency(&self) -> f64 {
        self.compute_s() / self.step_s
    }
}

/// Simulates one step of `buckets` (launch order) on `world` ranks connected by `link`. With
/// `overlap` false every all-reduce starts only after the whole backward and the updates only
/// after the last one (the baseline, as `--no-overlap` runs it).
pub fn simulate(buckets: &[SimBucket], costs: &StepCosts, link: &Link, world: usize, overlap: bool) -> Prediction {
    simulate_sharded(buckets, &[], costs, (link, world), overlap, SimSharding::Whole)
}

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

/// Simulates one step of `buckets` as `simulate` does, with the optimizer state kept as
/// `sharding` says; `gathers` (in launch order) are the all-gathers in forward.
///
/// Sharded, each bucket is reduce-scattered and each rank updates 1/N of it. In the steady state
/// a `GatherInForward` step starts with the previous step's all-gathers queued, in launch order,
/// behind its last reduce-scatter, which that step waited for: so they run from the step's
/// start, one collective at a time, forward waits for each before its first reader, and the
/// reduce-scatters queue behind them. Without overlap every collective runs after backward, the
/// all-gathers last, and the step waits for all of them.
pub fn simulate_sharded(
    buckets: &[SimBucket],
    gathers: &[GatherGroup],
    costs: &StepCosts,
    (link, world): (&Link, usize),
    overlap: bool,
    sharding: SimSharding,
) -> Prediction {
    // One rank has nothing to scatter or gather.
    let sharding = if world > 1 { sharding } else { SimSharding::Whole };
    let gathers = if sharding == SimSharding::GatherInForward { gathers } else { &[] };
    let gather_seconds = |g: &GatherGroup| link.ring_all_gather_seconds(g.bytes(), world);
    let (mut comm_free, mut gather_s) = (0.0f64, 0.0f64);
    let mut gather_end = vec![0.0f64; gathers.len()];
    if overlap {
        for (g, end) in gathers.iter().zip(&mut gather_end) {
            (comm_free, gather_s) = (comm_free + gather_seconds(g), gather_s + gather_seconds(g));
            *end = comm_free;
        }
    }
    // Forward, each layer after the all-gathers of the parameters it is the first to read (in
    // launch order among them): the gathers by first reader, walked once with the layers, so that
    // a plan search simulating thousands of groupings stays linear in the layers.
    let mut by_reader: Vec<usize> = (0..gathers.len()).collect();
    by_reader.sort_by_key(|&g| gathers[g].first_read); // Stable: launch order within a layer.
    let mut waits = by_reader.iter().map(|&g| (gathers[g].first_read, gather_end[g])).peekable();
    let (mut t, mut gather_exposed_s) = (0.0f64, 0.0f64);
    for (i, &f) in costs.forward_s.iter().enumerate() {
        while let Some((_, end)) = waits.next_if(|&(reader, _)| reader <= i) {
            if end > t {
                gather_exposed_s += end - t;
                t = end;
            }
        }
        t += f;
    }
    let forward_end = t;
    // Backward runs from the last layer down to the first one with parameters; the layers
    // before it need no gradients, and the generated code skips them.
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
            comm_free = start_s
                + match sharding {
                    SimSharding::Whole => b.comm_seconds(link, world),
                    SimSharding::GatherHere => {
                        b.reduce_scatter_seconds(link, world) + b.all_gather_seconds(link, world)
                    }
                    SimSharding::GatherInForward => b.reduce_scatter_seconds(link, world),
                };
            BucketTimes { ready_s, start_s, end_s: comm_free }
        })
        .collect();
    let (mut exposed_s, mut update_s) = (gather_exposed_s, 0.0);
    if !overlap {
        // Every reduction (then, in forward's place, every all-gather) before the first update.
        for g in gathers {
            (comm_free, gather_s) = (comm_free + gather_seconds(g), gather_s + gather_seconds(g));
        }
        t = backward_end.max(comm_free);
        exposed_s += t - backward_end;
    }
    for (b, times) in buckets.iter().zip(&times) {
        if times.end_s > t {
            exposed_s += times.end_s - t;
            t = times.end_s;
        }
        // PowerSGD's compression runs on the compute thread: counted with the update. Sharded,
        // each rank updates its shard alone.
        let u = match sharding {
            SimSharding::Whole => b.bytes as f64 * costs.update_s_per_byte + b.compression_seconds(),
            _ => b.bytes as f64 / world as f64 * costs.update_s_per_byte,
        };
        update_s += u;
        t += u;
    }
    Prediction {
        step_s: t,
        forward_s: costs.forward_s.iter().sum(),
        backward_s: backward_end - forward_end,
        update_s,
        comm_s: times.iter().map(|b| b.end_s - b.start_s).sum::<f64>() + gather_s,
        exposed_s,
        all_gather_s: gather_s,
        gather_exposed_s,
        buckets: times,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> StepCosts {
        // Three layers: forward 1 s each, backward 2 s each, free updates.
        StepCosts { forward_s: vec![1.0; 3], backward_s: vec![2.0; 3], update_s_per_byte: 0.0 }
    }

    const LINK: Link = Link { latency_s: 0.0, bandwidth_bytes_per_s: 1.0 };

    #[test]
    fn a_bucket_per_layer_hides_all_but_the_last() {
        // 2 ranks: t = S/B. Backward ends at 3 + 6 = 9; layer 2 done at 5, 1 at 7, 0 at 9.
        let b = [SimBucket::fp32(1, 2), SimBucket::fp32(1, 1), SimBucket::fp32(1, 0)];
        let p = simulate(&b, &costs(), &LINK, 2, true);
        assert_eq!(p.buckets[0], BucketTimes { ready_s: 5.0, start_s: 5.0, end_s: 6.0 });
        assert_eq!(p.buckets[2], BucketTimes { ready_s: 9.0, start_s: 9.0, end_s: 10.0 });
        assert_eq!((p.step_s, p.exposed_s, p.comm_s), (10.0, 1.0, 3.0));
        let baseline = simulate(&b, &costs(), &LINK, 2, false);
        assert_eq!((baseline.step_s, baseline.exposed_s), (12.0, 3.0));
        assert!((p.efficiency() - 0.9).abs() < 1e-12);
    }

    #[test]
    fn a_busy_link_queues_buckets_and_updates_overlap_later_reductions() {
        let costs = StepCosts { update_s_per_byte: 0.5, ..costs() };
        // Bucket 0 (3 s on the wire) delays bucket 1, ready at 7 but started at 8.
        let b = [SimBucket::fp32(3, 2), SimBucket::fp32(2, 1)];
        let p = simulate(&b, &costs, &LINK, 2, true);
        assert_eq!(p.buckets[1], BucketTimes { ready_s: 7.0, start_s: 8.0, end_s: 10.0 });
        // Layer 0 has no parameters here, so backward stops after layer 1, at 7. Wait for b0
        // until 8, update it until 9.5, wait for b1 until 10, update it until 11.
        assert_eq!((p.step_s, p.exposed_s, p.update_s), (11.0, 1.5, 2.5));
        assert_eq!(simulate(&b, &costs, &LINK, 1, true).comm_s, 0.0, "one rank communicates nothing");
    }

    #[test]
    fn flops_give_forward_and_twice_as_long_backward() {
        let c = StepCosts::from_flops([100u64, 0, 50].into_iter(), 4, 100.0);
        assert_eq!((c.forward_s, c.backward_s), (vec![4.0, 0.0, 2.0], vec![8.0, 0.0, 4.0]));
    }

    #[test]
    fn a_narrow_bucket_sends_half_the_bytes_and_pays_for_its_conversions() {
        let link = Link { latency_s: 0.0, bandwidth_bytes_per_s: 1e9 };
        let fp32 = SimBucket::fp32(4_000_000, 0);
        let bf16 = SimBucket { wire: WireFormat::Bf16, ..fp32 };
        let (t32, t16) = (fp32.comm_seconds(&link, 2), bf16.comm_seconds(&link, 2));
        assert!((t32 - 4e-3).abs() < 1e-12, "2 ranks move S·2(n-1)/n = S bytes: {t32}");
        assert!((t16 - (2e-3 + 4e6 * NARROWING_S_PER_BYTE)).abs() < 1e-12, "{t16}");
        assert_eq!(bf16.comm_seconds(&link, 1), 0.0, "one rank sends and converts nothing");
    }

    #[test]
    fn a_low_rank_bucket_pays_two_latencies_for_its_factors_and_its_compression_on_the_compute_thread() {
        let link = Link { latency_s: 1e-5, bandwidth_bytes_per_s: 1e9 };
        let fp32 = SimBucket::fp32(4_000_000, 0);
        let low = SimBucket { low_rank: Some(SimLowRank { wire_bytes: 40_000, factorised_bytes: 3_000_000 }), ..fp32 };
        let two = link.ring_all_reduce_seconds(20_000, 2) * 2.0;
        assert!((low.comm_seconds(&link, 2) - two).abs() < 1e-15);
        assert!(low.comm_seconds(&link, 2) < fp32.comm_seconds(&link, 2) / 2.0);
        let costs = StepCosts { forward_s: vec![1.0], backward_s: vec![2.0], update_s_per_byte: 0.0 };
        let p = simulate(&[low], &costs, &link, 2, true);
        assert!((p.update_s - 3e6 * LOW_RANK_S_PER_BYTE).abs() < 1e-15, "{}", p.update_s);
    }
}
