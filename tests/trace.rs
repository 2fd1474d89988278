//! Observability under real `mpirun`: the Chrome trace, the overlap report and the timeline of a
//! 2-rank run, and the overlap itself made visible by an emulated link.

mod common;

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

/// Median step time, hidden fraction and backward time of one `--report json` run of `tower`.
fn tower_run(extra: &[&str]) -> Value {
    let exe = example("tower");
    let mut args = vec!["-n", "2", exe.to_str().unwrap(), "--steps", "10", "--batch", "512", "--report", "json"];
    args.extend_from_slice(extra);
    reports(&mpirun_ok(&args)).pop().expect("a final report")
}

/// One measurement: the link sized to about 70% of backward as measured now, then both modes
/// alternated three times. `Err` says what fell short.
fn overlap_against_baseline() -> Result<String, String> {
    let calibration = tower_run(&["--no-overlap"]);
    let backward_s = calibration["backward_ms"].as_f64().unwrap() / 1e3;
    let bytes: u64 = calibration["buckets"].as_array().unwrap().iter().map(|b| b["bytes"].as_u64().unwrap()).sum();
    // Ring on 2 ranks: t = 2 * 1/2 * S/B = S/B (plus latencies, set to 0 here).
    let bandwidth = bytes as f64 / (0.7 * backward_s);
    let link = format!("latency=0us,bandwidth={:.6}GB/s", bandwidth / 1e9);

    // Alternate the modes so that drifts in machine load hit both alike.
    let (mut overlap, mut baseline) = (vec![], vec![]);
    for _ in 0..3 {
        overlap.push(tower_run(&["--link", &link]));
        baseline.push(tower_run(&["--link", &link, "--no-overlap"]));
    }
    let med = |runs: &[Value], key: &str| median(runs.iter().map(|r| r[key].as_f64().unwrap()));
    let (hidden, hidden_baseline) = (med(&overlap, "hidden_fraction"), med(&baseline, "hidden_fraction"));
    let (step, step_baseline) = (med(&overlap, "step_ms"), med(&baseline, "step_ms"));
    let comm_share = med(&baseline, "all_reduce_ms") / med(&baseline, "backward_ms");
    // On cores shared with the communication threads, overlapped compute runs slower; the step
    // without that slowdown says whether the schedule or the cores fall short.
    let slowdown = med(&overlap, "compute_ms") - med(&baseline, "compute_ms");
    let summary = format!(
        "link {link}: all-reduce / backward {comm_share:.2}; hidden {hidden:.3} (overlap) vs {hidden_baseline:.3} \
         (no overlap); step {step:.1} ms vs {step_baseline:.1} ms, ratio {:.3}; overlapped compute {slowdown:+.1} ms, \
         ratio without that {:.3}",
        step / step_baseline,
        (step - slowdown) / step_baseline
    );
    let checks = [
        ((0.5..1.0).contains(&comm_share), "the link is sized to about 70% of backward"),
        (hidden >= 0.8, "overlap hides at least 80% of the communication"),
        (hidden_baseline <= 0.1, "without overlap nearly nothing hides"),
        (step <= 0.75 * step_baseline, "the overlap step is at least 25% shorter"),
    ];
    match checks.iter().find(|(ok, _)| !ok) {
        None => Ok(summary),
        Some((_, what)) => Err(format!("{summary}: not met: {what}")),
    }
}

/// A timing claim, measured by `make bench` rather than asserted by `make test`: it depends on
/// the machine's load, and a test that fails because a neighbour compiled loses a good build.
#[test]
#[ignore = "a timing claim: `make bench` runs it"]
fn overlap_hides_communication_on_an_emulated_link() {
    // The machine is shared: a burst of outside load during one measurement (seen here: every
    // step 40% slower for a while) can eat the margin. Each attempt recalibrates and measures
    // both modes side by side; the claim must hold in one of three attempts.
    let mut failures = Vec::new();
    for attempt in 1..=3 {
        match overlap_against_baseline() {
            Ok(summary) => {
                println!("attempt {attempt}: {summary}");
                return;
            }
            Err(why) => {
                println!("attempt {attempt}: {why}");
                failures.push(why);
            }
        }
    }
    panic!("three attempts fell short:\n{}", failures.join("\n"));
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
            let backward_end = spans_of(&trace, rank, step, "backward").iter().map(|b| end(b)).fold(0.0, f64::max);
            for reduce in spans_of(&trace, rank, step, "all-reduce") {
                assert!(
                    start(reduce) + ROUNDING_US >= backward_end,
                    "no overlap, rank {rank} step {step}: {} started before backward ended",
                    reduce["name"]
                );
            }
        }
    }
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
