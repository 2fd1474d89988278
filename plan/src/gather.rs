//! The all-gathers of sharded optimizer state (ZeRO-1), planned at compile time: launched after
//! backward in the order the next forward reads them, each waited for right before the first
//! layer that reads one of its parameters.
//!
//! Their grouping need not be the buckets': a bucket may be gathered in several pieces, one per
//! layer that reads it first, so that forward starts on a bucket's first layer before its later
//! layers' parameters arrive, at one more latency per piece. By default each bucket is one
//! all-gather; with a cost model (`buckets = auto(..)` or `profile(..)`), the simulator chooses
//! (`choose_gathers`).

use crate::auto::Target;
pub use crate::gather_group::GatherGroup;
use crate::schedule::Schedule;
use crate::simulate::{sim_buckets, simulate_sharded, SimSharding};

impl Schedule {
    /// The all-gathers of sharded optimizer state, in launch (forward) order: `gathers`, or one
    /// per bucket.
    pub fn gather_groups(&self) -> Vec<GatherGroup> {
        if self.gathers.is_empty() {
            gathers_per_bucket(self)
        } else {
            self.gathers.to_vec()
        }
    }
}

/// One all-gather per bucket (PowerSGD's, never sharded, have none), in forward order.
pub fn gathers_per_bucket(schedule: &Schedule) -> Vec<GatherGroup> {
    ordered(schedule, |bucket, params| {
        let first_read = params.iter().map(|&(layer, _, _)| layer).min().unwrap_or(usize::MAX);
        vec![GatherGroup { bucket, start: 0, end: schedule.buckets[bucket].numel, first_read }]
    })
}

/// One all-gather per layer of each bucket (the parameters of one layer lie side by side in
/// their bucket), in forward order.
pub fn gathers_per_layer(schedule: &Schedule) -> Vec<GatherGroup> {
    ordered(schedule, |bucket, params| {
        let mut groups: Vec<GatherGroup> = Vec::new();
        for &(layer, start, end) in params {
            match groups.last_mut() {
                Some(g) if g.first_read == layer && g.end == start => g.end = end,
                _ => groups.push(GatherGroup { bucket, start, end, first_read: layer }),
            }
        }
        groups
    })
}

/// The groups `split` makes of each sharded bucket (given its parameters as `(layer, start,
/// end)` in buffer order), sorted into forward order.
fn ordered(
    schedule: &Schedule,
    split: impl Fn(usize, &[(usize, usize, usize)]) -> Vec<GatherGroup>,
) -> Vec<GatherGroup> {
    let mut groups: Vec<GatherGroup> = Vec::new();
    for (k, b) in schedule.buckets.iter().enumerate().filter(|(_, b)| b.low_rank.is_none()) {
        let mut params: Vec<(usize, usize, usize)> = b
            .params
            .iter()
            .map(|&r| {
                let p = schedule.param(r);
                (r.layer, p.offset, p.offset + p.numel())
            })
            .collect();
        params.sort_by_key(|&(_, start, _)| start);
        groups.extend(split(k, &params));
    }
    // Stable: within a layer, the buckets in the order backward filled them, reversed.
    groups.sort_by_key(|g| (g.first_read, std::cmp::Reverse(g.bucket), g.start));
    groups
}

/// The grouping the simulator predicts the fastest sharded step for on `target`: from one
/// all-gather per layer, adjacent pieces of a bucket merged while that shortens the step (ties
/// merge: fewer collectives).
pub fn choose_gathers(schedule: &Schedule, target: &Target) -> Vec<GatherGroup> {
    let buckets = sim_buckets(schedule);
    let step = |groups: &[GatherGroup]| {
        let link = (&target.link, target.world);
        simulate_sharded(&buckets, groups, &target.costs, link, true, SimSharding::GatherInForward).step_s
    };
    let mut groups = gathers_per_layer(schedule);
    let mut best = step(&groups);
    loop {
        let mut merged = false;
        for i in 0..groups.len() {
            let Some(j) = groups.iter().position(|g| g.bucket == groups[i].bucket && g.start == groups[i].end) else {
                continue;
            };
            let mut trial = groups.clone();
            let (a, b) = (trial[i], trial[j]);
            trial[i] = GatherGroup { end: b.end, first_read: a.first_read.min(b.first_read), ..a };
            trial.remove(j);
            trial.sort_by_key(|g| (g.first_read, std::cmp::Reverse(g.bucket), g.start));
            let s = step(&trial);
            if s <= best {
                (groups, best, merged) = (trial, s, true);
                break;
            }
        }
        if !merged {
            return groups;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::plan_buckets;
    use crate::limits::BucketLimits;
    use crate::link::Link;
    use crate::simulate::StepCosts;
    use crate::spec::{LayerSpec, Width};

    /// fc1 (4 -> 8), an activation, fc2 (8 -> 4), in one bucket: fc2's 36 elements first (backward
    /// fills it last layer first), then fc1's 40.
    fn one_bucket() -> Schedule {
        let linear = |name: &'static str, input, output| {
            LayerSpec::new(name, "Linear", Width::Fixed { input, output })
                .with_param("weight", &[output, input])
                .with_param("bias", &[output])
        };
        let specs = vec![linear("fc1", 4, 8), LayerSpec::new("act", "Relu", Width::Preserving), linear("fc2", 8, 4)];
        plan_buckets("M", &specs, &BucketLimits::Unlimited).unwrap()
    }

    #[test]
    fn a_bucket_is_gathered_whole_or_by_the_layers_that_read_it_first() {
        let s = one_bucket();
        assert_eq!(gathers_per_bucket(&s), [GatherGroup { bucket: 0, start: 0, end: 76, first_read: 0 }]);
        let by_layer = [
            GatherGroup { bucket: 0, start: 36, end: 76, first_read: 0 },
            GatherGroup { bucket: 0, start: 0, end: 36, first_read: 2 },
        ];
        assert_eq!(gathers_per_layer(&s), by_layer);
        assert_eq!(s.gather_groups(), gathers_per_bucket(&s), "the default");
    }

    #[test]
    fn the_simulator_splits_a_bucket_when_forward_can_start_sooner_and_merges_it_when_latency_dominates() {
        let s = one_bucket();
        let costs =
            StepCosts { forward_s: vec![1.0, 0.0, 1.0], backward_s: vec![2.0, 0.0, 2.0], update_s_per_byte: 0.0 };
        // A slow link: fc1 starts once its own 160 bytes are here, 18 s before fc2's.
        let slow = Target { costs: costs.clone(), link: Link { latency_s: 0.0, bandwidth_bytes_per_s: 4.0 }, world: 2 };
        assert_eq!(choose_gathers(&s, &slow), gathers_per_layer(&s));
        // A long latency: one all-gather pays it once.
        let far = Target { costs, link: Link { latency_s: 100.0, bandwidth_bytes_per_s: 1e12 }, world: 2 };
        assert_eq!(choose_gathers(&s, &far), gathers_per_bucket(&s));
    }

    #[test]
    fn a_schedule_names_its_chosen_gathers_and_its_fingerprint_tells_them_apart() {
        let mut s = one_bucket();
        let default = s.fingerprint();
        s.gathers = std::borrow::Cow::Owned(gathers_per_layer(&s));
        assert_ne!(s.fingerprint(), default);
        let text = s.to_string();
        assert!(
            text.contains("all-gathers of sharded state, in launch order: b0[36..76] before fc1, b0[0..36] before fc2"),
            "{text}"
        );
    }
}
