use super::*;
use crate::trace::breakdown::BucketTiming;
use overlap_plan::{BucketInfo, BucketLimits, LayerInfo, ParamInfo, ParamRef, ReadyOrder, Width, WireFormat};
use std::borrow::Cow;

const LAYERS: &[LayerInfo] = &[LayerInfo {
    tied: None,
    bucket_boundary: false,
    name: Cow::Borrowed("fc"),
    kind: Cow::Borrowed("Linear<2, 2>"),
    width: Width::Fixed { input: 2, output: 2 },
    flops_per_sample: 8,
    params: Cow::Borrowed(&[ParamInfo {
        name: Cow::Borrowed("weight"),
        shape: Cow::Borrowed(&[500_000]),
        index: 0,
        bucket: 0,
        offset: 0,
    }]),
    ready: ReadyOrder::Reverse,
}];
const BUCKETS: &[BucketInfo] = &[BucketInfo {
    params: Cow::Borrowed(&[ParamRef { layer: 0, param: 0 }]),
    numel: 500_000,
    launch_after: 0,
    wire: WireFormat::Fp32,
    low_rank: None,
}];
const SCHEDULE: Schedule = Schedule {
    model: Cow::Borrowed("Tiny"),
    limits: BucketLimits::Unlimited,
    layers: Cow::Borrowed(LAYERS),
    buckets: Cow::Borrowed(BUCKETS),
    shard_optimizer: false,
    gathers: Cow::Borrowed(&[]),
};

fn step(step: u64, rank: u32, compute_ms: u64, reduce_ms: u64, exposed_ms: u64) -> StepBreakdown {
    let ms = 1_000_000;
    StepBreakdown {
        step,
        rank,
        step_ns: (compute_ms + exposed_ms) * ms,
        forward_ns: compute_ms * ms / 2,
        backward_ns: compute_ms * ms / 2,
        all_reduce_ns: reduce_ms * ms,
        exposed_ns: exposed_ms * ms,
        buckets: vec![BucketTiming {
            bytes: 2_000_000,
            all_reduce_ns: reduce_ms * ms,
            updates_ns: reduce_ms * ms / 4,
            exposed_ns: exposed_ms * ms,
            ..BucketTiming::default()
        }],
        ..StepBreakdown::default()
    }
}

/// PowerSGD's buckets go whole for `start_iter` steps, then as factors: the bytes on the
/// wire, the bucket's times and the compression are one phase's (the compressed one where the
/// window has it), never medians between the two.
#[test]
fn powersgd_bytes_on_the_wire_are_the_compressed_steps_where_there_are_any() {
    let low_rank = SCHEDULE.clone().with_grad_comm(overlap_plan::GradComm::LowRank(overlap_plan::LowRank::new(4, 10)));
    let sent = |n: u64| {
        let compressed = n >= 10;
        let mut b = step(n, 0, 10, if compressed { 1 } else { 40 }, 0);
        b.buckets[0].bytes = if compressed { 10_000 } else { 2_000_000 };
        b.compress_ns = if compressed { 3_000_000 } else { 0 };
        b
    };
    // 10 steps sent whole, 8 compressed: medians over all of them would be the whole ones'.
    let both: Vec<StepBreakdown> = (0..18).map(sent).collect();
    let r = OverlapReport::new(&both, &low_rank, 2, CommMode::Overlap, None).unwrap();
    assert_eq!(r.buckets[0].wire_bytes, 10_000);
    assert_eq!((r.buckets[0].all_reduce_ms, r.compression_ms), (1.0, 3.0), "the compressed steps' times");
    // Every row is of the compressed steps: the compute holds the compression it names.
    assert_eq!((r.all_reduce_ms, r.compute_ms, r.steps, r.first_step), (1.0, 13.0, 8, 11));
    assert_eq!(r.sent_whole_left_out, 10);
    assert!(r.to_string().contains("left out: 10 steps that PowerSGD sent whole"), "{r}");
    let whole: Vec<StepBreakdown> = (0..8).map(sent).collect();
    let r = OverlapReport::new(&whole, &low_rank, 2, CommMode::Overlap, None).unwrap();
    assert_eq!(r.buckets[0].wire_bytes, 2_000_000, "before start_iter, the whole buckets");
    assert_eq!((r.all_reduce_ms, r.sent_whole_left_out), (40.0, 0));
}

/// A sharded bucket's bus bandwidth counts both halves: the reduce-scatter's bytes in bf16 and
/// the all-gather's in FP32, as one all-reduce of their mean.
#[test]
fn a_sharded_narrow_buckets_bus_bandwidth_counts_both_halves() {
    let sharded = |n: u64| {
        let mut b = step(n, 0, 10, 4, 0);
        // On an emulated 0.5 GB/s link, 2 ranks: 1 MB of bf16 and 2 MB of FP32 each cross once.
        (b.buckets[0].bytes, b.buckets[0].gathered_bytes, b.buckets[0].updates_ns) = (1_000_000, 2_000_000, 0);
        b
    };
    let b: Vec<StepBreakdown> = (0..3).map(sharded).collect();
    let link = Link { latency_s: 0.0, bandwidth_bytes_per_s: 0.5e9 };
    let r = OverlapReport::new(&b, &SCHEDULE, 2, CommMode::Overlap, Some(link)).unwrap();
    assert_eq!(r.buckets[0].wire_bytes, 1_000_000, "what the reduce-scatter sent");
    // 1.5 MB as one all-reduce in the 4 ms: busbw 1.5e6 / 4e-3 x 2(n-1)/n = 0.375 GB/s.
    assert!((r.buckets[0].bus_bandwidth_gb_s - 0.375).abs() < 1e-12, "{}", r.buckets[0].bus_bandwidth_gb_s);
}

#[test]
fn medians_over_steps_of_rank_means_and_the_derived_figures() {
    // Steps 0..3 on two ranks; rank 1 is the straggler in every step but the last.
    let b = [
        step(0, 0, 10, 4, 2),
        step(0, 1, 12, 4, 0),
        step(1, 0, 10, 4, 2),
        step(1, 1, 12, 4, 0),
        step(2, 0, 14, 8, 6),
        step(2, 1, 10, 8, 6),
    ];
    let r = OverlapReport::new(&b, &SCHEDULE, 2, CommMode::Overlap, None).unwrap();
    assert_eq!((r.steps, r.first_step, r.last_step), (3, 1, 3));
    assert_eq!((r.compute_ms, r.all_reduce_ms, r.exposed_ms), (11.0, 4.0, 1.0));
    assert_eq!(r.step_ms, 12.0, "the slowest rank's step, median over steps");
    assert_eq!((r.hidden_ms, r.hidden_fraction), (3.0, Some(0.75)));
    // The slowest rank's compute bounds every step here: 12, 12 and 14 ms.
    assert_eq!((r.lower_bound_ms, r.above_lower_bound), (12.0, 0.0));
    // 2 MB in the 3 ms of 4 that were not lent updates, on 2 ranks: algbw 2/3 GB/s, busbw x
    // 2(n-1)/n = 1.
    assert_eq!(r.buckets[0].lent_updates_ms, 1.0);
    assert!((r.buckets[0].bus_bandwidth_gb_s - 2.0 / 3.0).abs() < 1e-12);
    // On an emulated link the updates ran within the time it held the transfer: 4 ms.
    let link = Link { latency_s: 0.0, bandwidth_bytes_per_s: 0.5e9 };
    let held = OverlapReport::new(&b, &SCHEDULE, 2, CommMode::Overlap, Some(link)).unwrap();
    assert!((held.buckets[0].bus_bandwidth_gb_s - 0.5).abs() < 1e-12);
    assert_eq!(r.buckets[0].launched_after, "fc.backward");
    assert_eq!([r.ranks[0].slowest_in_steps, r.ranks[1].slowest_in_steps], [1, 2]);
    assert_eq!(r.straggler_gap_ms, 2.0);
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(json["hidden_fraction"], 0.75);
    assert!(r.to_string().contains("75.0% of the all-reduce time"));
    assert!(OverlapReport::new(&[], &SCHEDULE, 2, CommMode::Overlap, None).is_none());
}

#[test]
fn memory_lines_give_the_peak_against_the_need_and_its_parts() {
    let mut r =
        OverlapReport::new(&[step(0, 0, 10, 4, 1), step(0, 1, 10, 4, 1)], &SCHEDULE, 2, CommMode::Overlap, None)
            .unwrap();
    r.memory = Some(Memory {
        peak_rss_mib: vec![59.2, 61.0],
        needed_mib: 50.0,
        optimizer_state_mib: 6.25,
        activations_mib: 36.5,
        optimizer_shards: 2,
        communication_only: false,
    });
    let text = r.to_string();
    assert!(text.contains("peak RSS 61.0 MiB (largest rank) for 50.0 MiB of parameters"), "{text}");
    assert!(text.contains("and activations: 1.22x"), "{text}");
    assert!(text.contains("optimizer state: 6.25 MiB per rank, sharded over 2 ranks"), "{text}");
    assert!(text.contains("activations: 36.50 MiB per rank"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(json["memory"]["activations_mib"], 36.5);
    // A communication-only run holds its gradient buckets alone, and says so.
    r.memory = Some(Memory {
        peak_rss_mib: vec![9.0],
        needed_mib: 4.5,
        optimizer_state_mib: 0.0,
        activations_mib: 0.0,
        optimizer_shards: 1,
        communication_only: true,
    });
    let text = r.to_string();
    assert!(text.contains("peak RSS 9.0 MiB (largest rank) for 4.5 MiB of gradient buckets: 2.00x"), "{text}");
    assert!(!text.contains("optimizer state:") && !text.contains("activations:"), "{text}");
}

#[test]
fn emulation_is_named_and_one_rank_has_nothing_to_hide() {
    let link = Some(Link { latency_s: 5e-6, bandwidth_bytes_per_s: 25e9 });
    let r =
        OverlapReport::new(&[step(0, 0, 10, 4, 1), step(0, 1, 10, 4, 1)], &SCHEDULE, 2, CommMode::AfterBackward, link);
    let text = r.unwrap().to_string();
    assert!(text.contains("no-overlap") && text.contains("EMULATED LINK: latency 5.000 us, bandwidth 25.000 GB/s"));
    let single = OverlapReport::new(&[step(0, 0, 10, 0, 0)], &SCHEDULE, 1, CommMode::Overlap, link).unwrap();
    assert_eq!((single.hidden_fraction, single.emulated_link.as_deref()), (None, None));
    assert!(single.to_string().contains("one rank: nothing to all-reduce"));
    // Under mpirun a rank's communication thread runs the lent updates, even alone.
    let alone = OverlapReport::new(&[step(0, 0, 10, 4, 1)], &SCHEDULE, 1, CommMode::Overlap, None).unwrap();
    assert_eq!(alone.hidden_fraction, None);
    let skipped = OverlapReport::new(&[step(0, 0, 10, 0, 0), step(0, 1, 10, 0, 0)], &SCHEDULE, 2, CommMode::Skip, None);
    let text = skipped.unwrap().to_string();
    assert!(text.contains("compute-only: nothing is all-reduced"), "{text}");
    assert!(!text.contains("  bucket ") && !text.contains("spend waiting"), "no bucket table, no waits:\n{text}");
}

#[test]
fn without_overlap_buckets_wait_for_all_of_backward_and_nothing_is_hidden_below_zero() {
    // Waits longer than the all-reduces (6 ms exposed for 4 ms of summing).
    let r =
        OverlapReport::new(&[step(0, 0, 10, 4, 6), step(0, 1, 10, 4, 6)], &SCHEDULE, 2, CommMode::AfterBackward, None)
            .unwrap();
    assert_eq!((r.hidden_ms, r.hidden_fraction), (0.0, Some(0.0)));
    assert_eq!(r.buckets[0].launched_after, "all of backward");
    let text = r.to_string();
    assert!(text.contains("steps 1..=1 (1 step;") && text.contains("hidden           0.00 ms  0.0%"), "{text}");
}

#[test]
fn the_wire_column_fits_its_widest_cell_and_the_columns_after_it_line_up() {
    let mut r =
        OverlapReport::new(&[step(0, 0, 10, 4, 1), step(0, 1, 10, 4, 1)], &SCHEDULE, 2, CommMode::Overlap, None)
            .unwrap();
    let mut second = r.buckets[0].clone();
    (second.bucket, second.wire_format, second.wire_bytes) = (1, "rank 4".into(), 500);
    // A layer name longer than the column's least width widens it, for every row.
    second.launched_after = "h.11.attend.attn.fc.backward".into();
    (r.buckets[0].wire_format, r.buckets[0].wire_bytes) = ("rank 4".into(), 1023 * 1024 + 512);
    r.buckets.push(second);
    let text = r.to_string();
    let table: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("  bucket")).take(3).collect();
    let column = |line: &str, what: &str| line.find(what).unwrap_or_else(|| panic!("{what} in {line:?}"));
    let launched = column(table[0], "launched after");
    assert!(table[1].contains("  rank 4 1023.5 KiB") && table[2].contains("  rank 4 500 B"), "{text}");
    assert_eq!((column(table[1], "fc.backward"), column(table[2], "h.11.attend")), (launched, launched), "{text}");
    // Each heading ends where its figures do.
    let end = |line: &str, what: &str| column(line, what) + what.len();
    for (heading, figure) in [("bytes", "MiB"), ("all-reduce", " ms"), ("busbw", "GB/s"), ("exposed", "1.00 ms")] {
        assert_eq!(end(table[0], heading), end(table[1], figure), "{heading} in {text}");
    }
    for (heading, figure) in [("all-reduce", " ms"), ("busbw", "GB/s")] {
        assert_eq!(end(table[0], heading), end(table[2], figure), "{heading} in {text}");
    }
}
