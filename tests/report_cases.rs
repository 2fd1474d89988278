//! The overlap report in runs off the common path: resumed, on one rank under `mpirun`, timing
//! communication alone, writing a profile under a link without a bandwidth limit, and longer
//! than the steps rank 0 keeps for it.

mod common;

use std::process::Command;

use common::{example, mpirun, mpirun_available, scratch};

/// A resumed run's last window is its whole run: reported once, not twice.
#[test]
fn a_resumed_run_reports_its_window_once() {
    let dir = scratch("report-resumed");
    let ck = dir.path().join("ck");
    let mlp = |args: &[&str]| {
        let out = Command::new(example("mlp")).args(["--batch", "4"]).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    mlp(&["--steps", "4", "--report", "off", "--save", ck.to_str().unwrap()]);
    let resumed = mlp(&["--steps", "8", "--report-every", "4", "--resume", ck.to_str().unwrap()]);
    assert_eq!(resumed.matches("overlap report: ").count(), 1, "{resumed}");
    assert!(resumed.contains("steps 5..=8"), "{resumed}");
}

/// A run of more steps than rank 0 keeps for the report is reported over evenly spaced steps
/// of the whole run, and says so: rank 0's memory does not grow with the run's length.
#[test]
fn a_long_run_is_reported_over_evenly_spaced_steps() {
    // 1100 steps of a tiny model (about 0.1 ms each); at rate 0.005, as 0.05 diverges at batch 1.
    let args = ["--steps", "1100", "--batch", "1", "--lr", "0.005", "--log-every", "10000", "--report", "json"];
    let out = Command::new(example("custom_layer")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    // Every step up to 512, then every second, then every fourth (steps 0, 4, ..., 1096), of
    // the run's steps 1 to 1100, counted from 1.
    let span = ["steps", "sampled_every", "first_step", "last_step"].map(|key| report[key].as_u64());
    assert_eq!(span, [Some(275), Some(4), Some(1), Some(1100)], "{report}");
}

/// `--report json` prints one JSON document per line: the report, then one per `--simulate`
/// cluster, with every plan the text table lists (log lines go to stderr).
#[test]
fn json_reports_carry_the_simulated_clusters() {
    let args = ["--steps", "3", "--batch", "4", "--report", "json", "--simulate", "world=8,link=ib-ndr"];
    let out = Command::new(example("mlp")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0]["model"], "Mlp", "the report first: {stdout}");
    let simulated = &lines[1]["simulated"];
    assert_eq!((&simulated["model"], &simulated["world_size"]), (&"Mlp".into(), &8.into()), "{stdout}");
    let plans = simulated["plans"].as_array().unwrap();
    assert_eq!(plans[0]["plan"], "compiled (this binary)", "{stdout}");
    assert!(plans.iter().all(|p| p["step_ms"].as_f64().is_some_and(|ms| ms > 0.0)), "{stdout}");
    let text = Command::new(example("mlp")).args(&args[..4]).args(["--simulate", "world=8,link=ib-ndr"]).output();
    let text = String::from_utf8_lossy(&text.unwrap().stdout).into_owned();
    let table = text.split("simulated Mlp on 8 ranks").nth(1).unwrap_or_default();
    let rows = table.lines().skip(2).take_while(|l| l.starts_with("  ")).count();
    assert_eq!(rows, plans.len(), "as many rows in the table: {text}");
}

#[test]
fn runs_that_reduce_nothing_or_compute_nothing_say_so() {
    if !mpirun_available() {
        return;
    }
    let mlp = example("mlp");
    let mlp = mlp.to_str().unwrap();
    // One rank under mpirun: its communication thread runs the lent updates, and sums nothing.
    let out = mpirun(&["-n", "1", mlp, "--steps", "3", "--batch", "4"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("one rank: nothing to all-reduce"), "{stdout}");
    assert!(!stdout.contains(" over mpi") && !stdout.contains("% of the all-reduce time"), "{stdout}");
    // Communication alone: no prediction of a step that computes and updates.
    let out = mpirun(&["-n", "2", mlp, "--steps", "3", "--comm-only", "--link", "10gbe"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("2 rank(s), communication only over"), "{stdout}");
    assert!(!stdout.contains("simulator"), "{stdout}");
    // Communication alone on a model that shards its state: whole all-reduces, no all-gathers, so
    // no step begins after a pause in which its all-gathers ran, and none is left out.
    let zero = example("mlp_zero");
    let args =
        ["-n", "2", zero.to_str().unwrap(), "--steps", "5", "--batch", "2", "--comm-only", "--report-every", "2"];
    let out = mpirun(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for window in ["steps 1..=2 (2 steps", "steps 3..=4 (2 steps", "steps 1..=5 (5 steps"] {
        assert!(stdout.contains(window), "{window}: {stdout}");
    }
    assert!(!stdout.contains("left out"), "{stdout}");
}

/// A link without a bandwidth has none to plan with: the profile records no link (with a note),
/// and reads back.
#[test]
fn a_profile_under_a_link_without_bandwidth_reads_back() {
    if !mpirun_available() {
        return;
    }
    let dir = scratch("report-profile");
    let path = dir.path().join("p.json");
    let mlp = example("mlp");
    let args = ["-n", "2", mlp.to_str().unwrap(), "--steps", "3", "--batch", "4", "--report", "off"];
    let out = mpirun(&[&args[..], &["--link", "latency=5us", "--write-profile", path.to_str().unwrap()]].concat());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("note: the profile records no link"), "{stdout}");
    assert!(stdout.contains("EMULATED LINK: latency 5.000 us, no bandwidth limit"), "{stdout}");
    let profile = overlap::plan::Profile::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(profile.link, None);
}
