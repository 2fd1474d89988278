use super::*;
use crate::gather_group::GatherGroup;

/// Three layers: forward 1 s each, backward 2 s each, free updates.
fn costs() -> StepCosts {
    StepCosts { forward_s: vec![1.0; 3], backward_s: vec![2.0; 3], update_s_per_byte: 0.0 }
}

const LINK: Link = Link { latency_s: 0.0, bandwidth_bytes_per_s: 4.0 };

/// A bucket per layer, 8 bytes each: on 2 ranks a reduce-scatter or an all-gather takes 1 s,
/// an all-reduce 2 s. Bucket k (launch order) holds layer 2 - k, so forward reads bucket 2 first.
fn buckets() -> [SimBucket; 3] {
    [SimBucket::fp32(8, 2), SimBucket::fp32(8, 1), SimBucket::fp32(8, 0)]
}

/// One all-gather per bucket of `buckets`, in forward order.
fn gathers(buckets: &[SimBucket]) -> Vec<GatherGroup> {
    let group =
        |k: usize| GatherGroup { bucket: k, start: 0, end: buckets[k].bytes / 4, first_read: buckets[k].launch_after };
    (0..buckets.len()).rev().map(group).collect()
}

#[test]
fn all_gathers_in_forward_run_from_the_steps_start_in_forward_order() {
    let p =
        simulate_sharded(&buckets(), &gathers(&buckets()), &costs(), (&LINK, 2), true, SimSharding::GatherInForward);
    // All-gathers of buckets 2, 1, 0 end at 1, 2, 3; layer 0 waits for the first until 1, so
    // forward ends at 4. Backward: layers done at 6, 8, 10; reduce-scatters 6-7, 8-9, 10-11.
    assert_eq!((p.all_gather_s, p.gather_exposed_s), (3.0, 1.0));
    assert_eq!(p.buckets[0], BucketTimes { ready_s: 6.0, start_s: 6.0, end_s: 7.0 });
    assert_eq!(p.buckets[2], BucketTimes { ready_s: 10.0, start_s: 10.0, end_s: 11.0 });
    assert_eq!((p.step_s, p.exposed_s, p.comm_s), (11.0, 2.0, 6.0));
    assert_eq!((p.forward_s, p.backward_s), (3.0, 6.0));
}

#[test]
fn a_slow_all_gather_delays_the_layer_that_reads_it_and_the_reduce_scatters_behind_it() {
    // Bucket 2 (layer 0) is 32 bytes: its all-gather takes 4 s, and the others queue behind it.
    let b = [SimBucket::fp32(8, 2), SimBucket::fp32(8, 1), SimBucket::fp32(32, 0)];
    let p = simulate_sharded(&b, &gathers(&b), &costs(), (&LINK, 2), true, SimSharding::GatherInForward);
    // All-gathers end at 4, 5, 6; forward: layer 0 from 4 to 5, layer 1 waits until 5, ends at
    // 6, layer 2 waits until 6, ends at 7.
    assert_eq!(p.gather_exposed_s, 4.0);
    assert_eq!(p.buckets[0].ready_s, 9.0);
}

#[test]
fn all_gathers_right_after_each_reduce_scatter_cost_an_all_reduce() {
    let (whole, here) = (
        simulate(&buckets(), &costs(), &LINK, 2, true),
        simulate_sharded(&buckets(), &gathers(&buckets()), &costs(), (&LINK, 2), true, SimSharding::GatherHere),
    );
    assert_eq!((here.step_s, here.comm_s, here.exposed_s), (whole.step_s, whole.comm_s, whole.exposed_s));
    assert_eq!(here.all_gather_s, 0.0, "no all-gather runs in forward");
}

#[test]
fn each_rank_updates_its_shard_alone() {
    let costs = StepCosts { update_s_per_byte: 0.125, ..costs() };
    let whole = simulate(&buckets(), &costs, &LINK, 2, true);
    let sharded = simulate_sharded(&buckets(), &gathers(&buckets()), &costs, (&LINK, 2), true, SimSharding::GatherHere);
    assert_eq!((whole.update_s, sharded.update_s), (3.0, 1.5));
}

#[test]
fn without_overlap_every_collective_runs_after_backward() {
    let p =
        simulate_sharded(&buckets(), &gathers(&buckets()), &costs(), (&LINK, 2), false, SimSharding::GatherInForward);
    // Forward 3, backward to 9, three reduce-scatters to 12, three all-gathers to 15.
    assert_eq!((p.step_s, p.exposed_s, p.gather_exposed_s), (15.0, 6.0, 0.0));
    assert_eq!(p.step_s, simulate(&buckets(), &costs(), &LINK, 2, false).step_s);
}

#[test]
fn one_rank_or_whole_state_is_the_unsharded_step() {
    let whole = simulate(&buckets(), &costs(), &LINK, 2, true);
    let same = simulate_sharded(&buckets(), &gathers(&buckets()), &costs(), (&LINK, 2), true, SimSharding::Whole);
    assert_eq!(same, whole);
    let one =
        simulate_sharded(&buckets(), &gathers(&buckets()), &costs(), (&LINK, 1), true, SimSharding::GatherInForward);
    assert_eq!(one, simulate(&buckets(), &costs(), &LINK, 1, true));
}

#[test]
fn a_narrow_bucket_reduce_scatters_half_its_all_reduce_and_gathers_fp32_parameters() {
    let link = Link { latency_s: 0.0, bandwidth_bytes_per_s: 1e9 };
    let bf16 = SimBucket { wire: WireFormat::Bf16, ..SimBucket::fp32(4_000_000, 0) };
    let converting = 4e6 * NARROWING_S_PER_BYTE;
    let rs = bf16.reduce_scatter_seconds(&link, 2);
    assert!((rs - (1e-3 + converting)).abs() < 1e-12, "{rs}");
    assert!((bf16.all_gather_seconds(&link, 2) - 2e-3).abs() < 1e-12);
}
