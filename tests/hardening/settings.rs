//! Flags that contradict each other or ask for more than any machine holds, and what the
//! benchmark modes and `--print-schedule` say they do.

use super::*;

#[test]
fn print_schedule_says_what_the_planner_chose_and_whose_plan_it_prints() {
    // A plan chosen from a profile: its choice and prediction, as the model's doc comment says.
    let out = Command::new(example("uneven")).arg("--print-schedule").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("buckets chosen by profile(") && text.contains("predicted step: "), "{text}");
    // DDP's plan for the same layers is labelled as DDP's, with no planner's notes.
    let out = Command::new(example("uneven")).arg("--print-schedule=ddp").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("PyTorch DDP's rebuilt buckets") && !text.contains("predicted step"), "{text}");
}

#[test]
fn flags_that_would_be_ignored_are_refused() {
    let (ok, text) = mlp(&["--gpu", "0", "--steps", "1"]);
    assert!(!ok && text.contains("--gpu chooses a GPU for --device cuda"), "{text}");
    // A classifier of synthetic features has no characters to sample: refused before step 1.
    let (ok, text) = mlp(&["--steps", "1", "--batch", "4", "--sample", "5"]);
    assert!(!ok && text.contains("--sample prints the characters a language model generates"), "{text}");
    assert!(!text.contains("step      1"), "{text}");
    let (ok, text) = mlp(&["--comm-only", "--steps", "1", "--sample", "5"]);
    assert!(!ok && text.contains("--comm-only trains nothing, so it has nothing to do with --sample"), "{text}");
    let (ok, text) = mlp(&["--comm-only", "--steps", "1", "--save", "nowhere", "--data", "nothing"]);
    assert!(!ok && text.contains("--comm-only trains nothing, so it has nothing to do with --save, --data"), "{text}");
    // What it does hold, it reports: the gradient buckets, not a training run's state.
    // Its trace says so too.
    let root = scratch("comm-only");
    let trace = root.path().join("trace.json");
    let (ok, text) = mlp(&["--comm-only", "--steps", "2", "--trace", trace.to_str().unwrap()]);
    assert!(ok && text.contains("MiB of gradient buckets: ") && !text.contains("optimizer state:"), "{text}");
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert_eq!(trace["otherData"]["mode"], "communication only");
    // Nor silently with --print-schedule, which runs nothing; and the program says its own name.
    let (ok, text) = mlp(&["--print-schedule", "--gpu", "0", "--lr", "3"]);
    assert!(
        ok && text.contains("note: --print-schedule prints the schedule and runs nothing: --gpu, --lr have no effect")
    );
    let (ok, text) = mlp(&["--version"]);
    assert!(ok && text.starts_with("mlp "), "{text}");
}

#[test]
fn sizes_beyond_the_machine_are_refused_before_anything_is_allocated() {
    let (ok, text) = mlp(&["--batch", "18446744073709551615", "--steps", "1"]);
    assert!(!ok && text.contains("needs more memory than any machine can address"), "{text}");
    let (ok, text) = mlp(&["--batch", "2305843009213693952", "--steps", "1"]);
    assert!(!ok && text.contains("needs more memory than any machine can address"), "{text}");
    let (ok, text) = mlp(&["--batch", "1000000", "--steps", "1"]);
    assert!(!ok && text.contains("GiB per rank") && text.contains("GiB available"), "{text}");
    assert!(text.contains("64.0 GiB of activations, which a smaller --batch reduces"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    // A huge step count is a long run, not an allocation: it starts training.
    let mut run = Command::new(example("mlp"))
        .args(["--steps", "18446744073709551615", "--batch", "4", "--log-every", "1", "--report", "off"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(run.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let _ = run.kill();
    let _ = run.wait();
    assert!(first.starts_with("step      1"), "{first}");
}

#[test]
fn counts_past_any_memory_or_sample_count_are_refused_at_once() {
    for (args, expected) in [
        (&["--accumulate", "9223372036854775807", "--steps", "1"][..], "--accumulate 9223372036854775807"),
        (&["--steps", "1000000000000", "--report-every", "1000000000000", "--trace", "t.json"], "--report-every"),
        (&["--steps", "18446744073709551615", "--report-every", "18446744073709551615", "--timeline", "t.svg"], ADDR),
    ] {
        let root = scratch("huge-counts");
        let started = Instant::now();
        let (code, text) = mlp_in(root.path(), &[], &[&["--batch", "4"][..], args].concat());
        assert_eq!(code, 1, "{args:?}:\n{text}");
        assert!(text.contains(expected) && !text.contains("panicked"), "{args:?}:\n{text}");
        assert!(!text.contains("step      1") && started.elapsed() < Duration::from_secs(30), "{args:?}: not up front");
    }
}

const ADDR: &str = "needs more memory than any machine can address";

#[test]
fn comm_only_says_that_it_sends_powersgds_buckets_whole() {
    if !common::mpirun_available() {
        return;
    }
    let exe = example("mlp_powersgd");
    let run = |extra: &[&str]| {
        let out =
            common::mpirun(&[&["-n", "2", exe.to_str().unwrap(), "--comm-only", "--steps", "2"][..], extra].concat());
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{text}");
        text
    };
    let text = run(&[]);
    assert!(text.contains("note: Mlp sends PowerSGD's factors") && text.contains("whole in FP32"), "{text}");
    // Nothing was computed, so no rank was the slowest to compute.
    assert!(text.contains("overlap report") && !text.contains("slowest rank:"), "{text}");
    // Sent whole by choice, as training then sends them: nothing to say.
    let text = run(&["--grad-comm", "fp32"]);
    assert!(!text.contains("PowerSGD's factors"), "{text}");
}

#[test]
fn compute_only_on_several_ranks_saves_nothing_as_the_runs_result() {
    if !common::mpirun_available() {
        return;
    }
    let root = scratch("compute-only-save");
    let ck = root.path().join("ck");
    let text_file = root.path().join("text.txt");
    std::fs::write(&text_file, "a text of a few characters, long enough to hold a window or two\n".repeat(8)).unwrap();
    let (ck, text_file) = (ck.to_str().unwrap(), text_file.to_str().unwrap());
    // Each a result of the run: its parameters, or a loss or a sample of them.
    let results = [
        ("mlp", &["--save", ck][..], "--save"),
        ("mlp", &["--save-params", ck], "--save-params"),
        ("mlp", &["--eval-every", "1"], "a held-out loss (--eval-every)"),
        ("gpt", &["--text", text_file, "--context", "8", "--eval-every", "0", "--sample", "5"], "--sample"),
    ];
    for (name, flags, named) in results {
        let exe = example(name);
        let common = [exe.to_str().unwrap(), "--compute-only", "--steps", "2", "--batch", "4"];
        let out = common::mpirun(&[&["-n", "2"][..], &common, flags].concat());
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "{flags:?} with --compute-only on 2 ranks was accepted:\n{text}");
        assert!(text.contains("sums no gradients") && text.contains(named), "{text}");
    }
    // The example's own default held-out loss is left out, with a note; asked for, it is refused (above).
    let exe = example("gpt");
    let default_eval = [
        exe.to_str().unwrap(),
        "--compute-only",
        "--steps",
        "2",
        "--batch",
        "4",
        "--text",
        text_file,
        "--context",
        "8",
    ];
    let out = common::mpirun(&[&["-n", "2"][..], &default_eval].concat());
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("the example's --eval-every is not applied"), "{text}");
    assert!(!text.contains("validation loss"), "{text}");
    // One rank has nothing to sum: its parameters are the run's.
    let (ok, text) = mlp(&["--compute-only", "--steps", "2", "--batch", "4", "--save-params", &format!("{ck}/p")]);
    assert!(ok, "{text}");
}
