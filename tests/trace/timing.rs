//! The timing claim `make bench` measures (`--ignored`): on an emulated link, `tower`'s
//! overlapped step against its step without overlap.

use super::*;

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
