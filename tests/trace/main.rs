//! Observability under real `mpirun`: the Chrome trace, the overlap report and the timeline of a
//! 2-rank run, and the overlap itself made visible by an emulated link.

#[path = "../common/mod.rs"]
mod common;
mod schedule;
mod timing;

use common::{example, mpirun_ok, scratch};
use overlap::plan::Link;
use overlap::trace::median;
use serde_json::Value;

/// `mlp`'s buckets in ready order: head and fc3, fc2, fc1.
const MLP_BUCKET_BYTES: [u64; 3] = [4216842 * 4, 4196352 * 4, 1607680 * 4];

/// The JSON reports a `--report json` run printed, one per line.
fn reports(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

fn close(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance * a.abs().max(b.abs()).max(1.0)
}

/// Spans of one rank and step, by category.
fn spans_of<'t>(trace: &'t Value, rank: u64, step: u64, cat: &str) -> Vec<&'t Value> {
    let events = trace["traceEvents"].as_array().unwrap();
    events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == rank && e["args"]["step"] == step && e["cat"] == cat)
        .collect()
}

fn start(e: &Value) -> f64 {
    e["ts"].as_f64().unwrap()
}

fn end(e: &Value) -> f64 {
    start(e) + e["dur"].as_f64().unwrap()
}

#[test]
fn two_rank_trace_report_and_timeline_agree() {
    let root = scratch("trace");
    let dir = root.path();
    let (trace, svg) = (dir.join("run.json"), dir.join("step.svg"));
    let exe = example("mlp");
    let stdout = mpirun_ok(&[
        "-n",
        "2",
        exe.to_str().unwrap(),
        "--steps",
        "4",
        "--batch",
        "8",
        "--link",
        "latency=10us,bandwidth=20GB/s",
        "--report",
        "json",
        "--report-every",
        "2",
        "--trace",
        trace.to_str().unwrap(),
        "--timeline",
        svg.to_str().unwrap(),
    ]);
    let reports = reports(&stdout);
    assert_eq!(reports.len(), 3, "one report per window of 2 steps, then one for the whole run:\n{stdout}");
    let span = |r: &Value| (r["first_step"].as_u64(), r["last_step"].as_u64(), r["steps"].as_u64());
    assert_eq!(span(&reports[0]), (Some(1), Some(2), Some(2)));
    assert_eq!(span(&reports[1]), (Some(3), Some(4), Some(2)), "the last window is reported too");
    assert_eq!(span(&reports[2]), (Some(1), Some(4), Some(4)));
    let report = &reports[2];
    // The host's batch fills, on the compute thread beside its compute and waits: within `other`.
    let (data, other) = (report["data_ms"].as_f64().unwrap(), report["other_ms"].as_f64().unwrap());
    assert!(data > 0.0 && data <= other + 1e-9, "data {data} ms, other {other} ms");

    // The trace: every rank, every step, every layer, bucket and wait point.
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).expect("trace is JSON");
    assert!(trace["otherData"]["emulated_link"].as_str().is_some_and(|l| l.contains("20.000 GB/s")));
    let (mut exposed, mut reduced) = (vec![], vec![]);
    for step in 1..=4u64 {
        let (mut step_exposed, mut step_reduced) = (0.0, 0.0);
        for rank in 0..2u64 {
            let of = |cat: &str| spans_of(&trace, rank, step, cat);
            let whole = of("step");
            assert_eq!(whole.len(), 1, "rank {rank} step {step}");
            let (start, end) = (
                whole[0]["ts"].as_f64().unwrap(),
                whole[0]["ts"].as_f64().unwrap() + whole[0]["dur"].as_f64().unwrap(),
            );
            // No optimizer spans: SGD's updates run inside the all-reduces, on the parameters
            // lent to them.
            for (cat, count) in
                [("forward", 7), ("backward", 7), ("loss", 1), ("wait", 3), ("optimizer", 0), ("all-reduce", 3)]
            {
                let found = of(cat);
                assert_eq!(found.len(), count, "rank {rank} step {step}: {cat}");
                let track = if cat == "all-reduce" { 1 } else { 0 };
                assert!(found.iter().all(|e| e["tid"] == track), "{cat} on the wrong track");
                if cat != "all-reduce" {
                    let inside = |e: &&Value| {
                        let ts = e["ts"].as_f64().unwrap();
                        ts >= start - 1e-3 && ts + e["dur"].as_f64().unwrap() <= end + 1e-3
                    };
                    assert!(found.iter().all(inside), "{cat} outside its step");
                }
            }
            let mut bytes: Vec<(u64, u64)> = of("all-reduce")
                .iter()
                .map(|e| (e["args"]["bucket"].as_u64().unwrap(), e["args"]["bytes"].as_u64().unwrap()))
                .collect();
            bytes.sort();
            assert_eq!(bytes, MLP_BUCKET_BYTES.iter().enumerate().map(|(k, &b)| (k as u64, b)).collect::<Vec<_>>());
            let sum = |cat: &str| of(cat).iter().map(|e| e["dur"].as_f64().unwrap() / 1e3).sum::<f64>();
            step_exposed += sum("wait") / 2.0;
            step_reduced += sum("all-reduce") / 2.0;
        }
        exposed.push(step_exposed);
        reduced.push(step_reduced);
    }

    // The report says what the trace says, and its numbers add up.
    let num = |key: &str| report[key].as_f64().unwrap_or_else(|| panic!("{key} in {report}"));
    assert!(close(num("exposed_ms"), median(exposed.into_iter()), 1e-3), "{report}");
    assert!(close(num("all_reduce_ms"), median(reduced.into_iter()), 1e-3), "{report}");
    assert!(close(num("hidden_ms"), (num("all_reduce_ms") - num("exposed_ms")).max(0.0), 1e-9));
    assert!(close(num("hidden_fraction"), (1.0 - num("exposed_ms") / num("all_reduce_ms")).clamp(0.0, 1.0), 1e-9));
    // Each step's slowest rank bounds it: at least the mean rank's compute and all-reduce.
    assert!(num("lower_bound_ms") >= num("compute_ms").max(num("all_reduce_ms")) * 0.999, "{report}");
    assert!(close(num("above_lower_bound"), num("step_ms") / num("lower_bound_ms") - 1.0, 1e-9));
    assert!(num("step_ms") >= num("lower_bound_ms") * 0.99, "no step beats its lower bound: {report}");
    assert!(report["emulated_link"].as_str().is_some());
    let buckets = report["buckets"].as_array().unwrap();
    assert_eq!(buckets.iter().map(|b| b["bytes"].as_u64().unwrap()).collect::<Vec<_>>(), MLP_BUCKET_BYTES);
    for b in buckets {
        let (bytes, ms) = (b["bytes"].as_f64().unwrap(), b["all_reduce_ms"].as_f64().unwrap());
        // SGD's updates run on the communication thread, between the chunks' sums.
        let updates = b["lent_updates_ms"].as_f64().unwrap();
        assert!(updates > 0.0 && updates < ms, "{b}");
        // The link holds every all-reduce for at least its modelled time.
        let model = Link { latency_s: 10e-6, bandwidth_bytes_per_s: 20e9 }.ring_all_reduce_seconds(bytes as usize, 2);
        assert!(ms >= model * 1e3 * 0.99, "bucket faster than the emulated link: {b}");
        // n = 2: busbw = algbw, of the transfer alone (at least the link's modelled time).
        let transfer = (ms - updates).max((model * 1e3).min(ms));
        assert!(close(b["bus_bandwidth_gb_s"].as_f64().unwrap(), bytes / (transfer / 1e3) / 1e9, 1e-9), "{b}");
    }
    let slowest: u64 =
        report["ranks"].as_array().unwrap().iter().map(|r| r["slowest_in_steps"].as_u64().unwrap()).sum();
    assert_eq!(slowest, 4, "one slowest rank per step");

    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for text in ["rank 0", "rank 1", "EMULATED LINK", "b2: all-reduce / update (6.13 MiB)", "fc2"] {
        assert!(svg.contains(text), "timeline lacks {text}");
    }
}

#[test]
fn one_process_reports_no_communication() {
    let out = std::process::Command::new(example("tower"))
        .args(["--steps", "2", "--batch", "4", "--link", "ib-hdr"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("overlap report: Tower, 1 rank(s)"), "{stdout}");
    assert!(stdout.contains("one rank: nothing to all-reduce"), "{stdout}");
    assert!(stderr.contains("--link") && stderr.contains("no effect with one rank"), "{stderr}");
    assert!(!stdout.contains("EMULATED"), "nothing was emulated: {stdout}");
    // The updates lent to the (local) all-reduces run on the compute thread: the optimizer's time.
    let out = std::process::Command::new(example("tower"))
        .args(["--steps", "2", "--batch", "4", "--report", "json", "--optimizer", "adamw"])
        .output()
        .unwrap();
    let report = reports(&String::from_utf8_lossy(&out.stdout)).pop().expect("a report");
    assert!(report["optimizer_ms"].as_f64().unwrap() > 0.0, "{report}");
}

/// The timeline draws the step nearest the run's median step time, whichever report window it
/// fell in (it used to draw the last window's median: with `--report-every 1`, the last step).
#[test]
fn the_timeline_draws_the_runs_median_step() {
    let root = scratch("timeline-median");
    let (trace, svg) = (root.path().join("run.json"), root.path().join("step.svg"));
    let out = std::process::Command::new(example("mlp"))
        .args(["--steps", "8", "--batch", "8", "--report-every", "1", "--trace", trace.to_str().unwrap()])
        .args(["--timeline", svg.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let drawn: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("timeline: {} (step ", svg.display())))
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a timeline line: {stdout}"));
    // From the trace: steps 2..=8 (the first warms up), the median of 7 times, and its step.
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let mut steps: Vec<(u64, f64)> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?.strip_prefix("step ")?.parse().ok()?, e["dur"].as_f64()?)))
        .filter(|&(step, _)| step > 1)
        .collect();
    steps.sort_by(|a, b| a.1.total_cmp(&b.1));
    assert_eq!(steps.len(), 7, "{steps:?}");
    assert_eq!(drawn, steps[3].0, "the median of {steps:?}");
}

/// Ranks on one machine share one time zero: an all-reduce, which ends on both ranks together,
/// ends at the same time in both ranks' rows, even where one rank read its clock 200 ms late (as
/// a rank the scheduler wakes late from the barrier did, shifting its rows by as much). The
/// median over the all-reduces is compared, with half the offset as the bound: a busy machine may
/// delay a rank's record of one end by a scheduler slice, never most of them by 100 ms.
#[test]
fn ranks_share_one_time_zero() {
    if !common::mpirun_available() {
        return;
    }
    let root = scratch("trace-epoch");
    let trace = root.path().join("run.json");
    let exe = common::fault_mlp();
    let args = [exe.to_str().unwrap(), "--steps", "3", "--batch", "8", "--trace", trace.to_str().unwrap()];
    let out = common::mpirun_with_env(&[("OVERLAP_FAULT", "late-trace:1:200")], &[&["-n", "2"][..], &args].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let ends = |rank: u64| -> Vec<(String, u64, f64)> {
        let events = trace["traceEvents"].as_array().unwrap().iter();
        events
            .filter(|e| e["pid"] == rank && e["cat"] == "all-reduce")
            .map(|e| (e["name"].as_str().unwrap().to_string(), e["args"]["step"].as_u64().unwrap(), end(e)))
            .collect()
    };
    let (zero, one) = (ends(0), ends(1));
    assert!(!zero.is_empty() && zero.len() == one.len(), "{zero:?} {one:?}");
    let mut apart = Vec::new();
    for ((name, step, a), (other, other_step, b)) in zero.iter().zip(&one) {
        assert_eq!((name, step), (other, other_step));
        apart.push((a - b).abs());
    }
    let median = overlap::trace::median(apart.iter().copied());
    assert!(median < 100_000.0, "the ranks' all-reduces end {median} us apart (median): {zero:?} {one:?}");
}

/// A sharded run's report leaves out the steps that began after a pause outside any step (here a
/// gather of the report's spans every 2 steps, and a validation), whose all-gathers ran during the
/// pause and read as hidden; a report of every step keeps them and says so. Unsharded steps
/// have nothing in flight across a pause and are all kept.
#[test]
fn a_sharded_report_leaves_out_the_steps_after_a_pause() {
    let exe = example("mlp_zero");
    let run = |extra: &[&str]| {
        let args = [&["-n", "2", exe.to_str().unwrap(), "--steps", "9", "--batch", "2", "--report", "json"], extra];
        reports(&mpirun_ok(&args.concat())).pop().expect("a final report")
    };
    // Pauses after steps 3 and 6 (reports) and 4 and 8 (validations): steps 4, 5, 7 and 9 follow
    // one (the pauses after the last step delay nothing).
    let report = run(&["--report-every", "3", "--eval-every", "4", "--eval-batches", "1"]);
    assert_eq!((report["steps"].as_u64(), &report["after_pause"]), (Some(5), &serde_json::json!({"left_out": 4})));
    // Most steps follow one: they are kept.
    let every = run(&["--report-every", "1"]);
    let kept = serde_json::json!({"kept": {"paused": 8, "of": 9}});
    assert_eq!((every["steps"].as_u64(), &every["after_pause"]), (Some(9), &kept));
    let whole = run(&["--report-every", "3", "--no-shard-optimizer"]);
    assert_eq!((whole["steps"].as_u64(), &whole["after_pause"]), (Some(9), &Value::Null));
}
