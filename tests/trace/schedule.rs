//! The compiled schedule read back from a 2-rank trace: where each bucket's all-reduce starts
//! and ends against the backward calls, with overlap and without.

use super::*;

/// Each bucket's launch point, parsed from the schedule the trace carries: bucket index and the
/// layer whose backward completes it.
fn launch_points(trace: &Value) -> Vec<(u64, String)> {
    let schedule = trace["otherData"]["schedule"].as_str().expect("the trace carries its schedule");
    schedule
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let bucket = words.next()?.strip_prefix('b')?.parse().ok()?;
            let layer = words.next()?.strip_suffix(".backward")?;
            Some((bucket, layer.to_string()))
        })
        .collect()
}

/// `mlp` on 2 ranks over a slow emulated link, with a trace, overlapped or not.
fn traced_run(extra: &[&str]) -> Value {
    let root = scratch("structure");
    let path = root.path().join("run.json");
    let exe = example("mlp");
    let mut args = vec!["-n", "2", exe.to_str().unwrap(), "--steps", "3", "--batch", "8", "--report", "off"];
    args.extend_from_slice(&["--link", "latency=10us,bandwidth=2GB/s", "--trace", path.to_str().unwrap()]);
    args.extend_from_slice(extra);
    mpirun_ok(&args);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("trace is JSON")
}

/// What overlap means, read from the trace as the compiled schedule says it, with no claim on
/// durations (those depend on the machine's load; `make bench` measures them): each bucket's
/// all-reduce is launched after the backward call that completes it and before the next
/// backward call begins; every span lies inside its step; without overlap no all-reduce starts
/// before the whole backward is done.
#[test]
fn the_trace_follows_the_compiled_schedule_with_and_without_overlap() {
    let trace = traced_run(&[]);
    let points = launch_points(&trace);
    assert!(points.len() >= 2, "mlp has several buckets: {points:?}");
    const ROUNDING_US: f64 = 0.01;
    for rank in 0..2 {
        for step in 1..=3 {
            let whole = spans_of(&trace, rank, step, "step");
            assert_eq!(whole.len(), 1, "rank {rank} step {step}");
            let mut backward = spans_of(&trace, rank, step, "backward");
            backward.sort_by(|a, b| start(a).total_cmp(&start(b)));
            let all_reduces = spans_of(&trace, rank, step, "all-reduce");
            assert_eq!(all_reduces.len(), points.len(), "rank {rank} step {step}: one all-reduce per bucket");
            for (bucket, layer) in &points {
                let at = backward.iter().position(|b| b["args"]["layer"] == layer.as_str()).expect("the launch layer");
                let reduce =
                    all_reduces.iter().find(|a| a["args"]["bucket"] == *bucket).expect("the bucket's all-reduce");
                let queued = reduce["args"]["queued_us"].as_f64().unwrap();
                let what = format!("rank {rank} step {step}: b{bucket} launched after {layer}");
                assert!(queued + ROUNDING_US >= end(backward[at]), "{what}, but queued before it ended");
                if let Some(next) = backward.get(at + 1) {
                    assert!(queued <= start(next) + ROUNDING_US, "{what}, but queued after the next backward began");
                }
                assert!(start(reduce) + ROUNDING_US >= queued, "{what}: started before it was queued");
            }
            let (step_start, step_end) = (start(whole[0]), end(whole[0]));
            // The next step's batch is filled ahead, between this step's backward and its
            // waits and updates, while the last buckets' sums are in flight; the first step
            // fills its own batch first, the last step none ahead.
            let mut fills = spans_of(&trace, rank, step, "data");
            fills.sort_by(|a, b| start(a).total_cmp(&start(b)));
            let own = usize::from(step == 1);
            assert_eq!(fills.len(), own + usize::from(step < 3), "rank {rank} step {step}: {fills:?}");
            assert!(fills.iter().all(|f| f["tid"] == 2), "fills on the data track");
            if let Some(ahead) = fills.get(own).filter(|_| step < 3) {
                let backward_end = backward.iter().map(|b| end(b)).fold(0.0, f64::max);
                let mut after = spans_of(&trace, rank, step, "wait");
                after.extend(spans_of(&trace, rank, step, "optimizer"));
                let first_after = after.iter().map(|s| start(s)).fold(f64::INFINITY, f64::min);
                assert!(
                    start(ahead) + ROUNDING_US >= backward_end,
                    "rank {rank} step {step}: filled before backward ended"
                );
                assert!(
                    end(ahead) <= first_after + ROUNDING_US,
                    "rank {rank} step {step}: filled after the waits began"
                );
            }
            for cat in ["forward", "loss", "backward", "wait", "all-reduce", "data"] {
                for span in spans_of(&trace, rank, step, cat) {
                    let inside = start(span) + ROUNDING_US >= step_start && end(span) <= step_end + ROUNDING_US;
                    assert!(inside, "rank {rank} step {step}: {} lies outside its step", span["name"]);
                }
            }
        }
    }

    let trace = traced_run(&["--no-overlap"]);
    for rank in 0..2 {
        for step in 1..=3 {
            let backward = spans_of(&trace, rank, step, "backward");
            assert!(!backward.is_empty(), "no overlap, rank {rank} step {step}: backward recorded");
            let backward_end = backward.iter().map(|b| end(b)).fold(0.0, f64::max);
            let all_reduces = spans_of(&trace, rank, step, "all-reduce");
            assert_eq!(
                all_reduces.len(),
                points.len(),
                "no overlap, rank {rank} step {step}: one all-reduce per bucket"
            );
            for reduce in all_reduces {
                assert!(
                    start(reduce) + ROUNDING_US >= backward_end,
                    "no overlap, rank {rank} step {step}: {} started before backward ended",
                    reduce["name"]
                );
            }
        }
    }
}
