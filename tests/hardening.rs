//! Inputs that used to lose a run or be ignored: a closed stdout, output paths that cannot be
//! written, a checkpoint folder holding another run or used by a running job, flags that
//! contradict each other, counts past any memory, a damaged data position, a stop signal in
//! the last step and a parameters file write cut short. Each is refused up front with a
//! message, or survived.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{example, fault_mlp, scratch};

/// Runs `mlp args` as one process: (success, stdout and stderr).
fn mlp(args: &[&str]) -> (bool, String) {
    let out = Command::new(example("mlp")).args(args).output().expect("mlp starts");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// `mlp args` with `env`, from `dir`: (exit code, or 128 + the signal that ended it; stdout and
/// stderr).
fn mlp_in(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    // A fault is injected into the mlp example built with fault injection (`fault-mlp`).
    let exe = if env.iter().any(|(k, _)| *k == "OVERLAP_FAULT") { fault_mlp() } else { example("mlp") };
    let out = Command::new(exe).current_dir(dir).envs(env.iter().copied()).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().or(out.status.signal().map(|s| 128 + s)).unwrap_or(-1), text)
}

/// Starts `mlp args`, reads `lines` lines of its stdout, then closes the pipe as `| head` does;
/// returns whether it still succeeded.
fn mlp_into_closed_pipe(args: &[&str], lines: usize) -> (bool, String) {
    let mut child =
        Command::new(example("mlp")).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..lines {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
    }
    drop(reader);
    let out = child.wait_with_output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_closed_stdout_stops_the_printing_not_the_run() {
    let root = scratch("closed-stdout");
    let (ck, params) = (root.path().join("ck"), root.path().join("p.safetensors"));
    let (ck, params) = (ck.to_str().unwrap(), params.to_str().unwrap());
    let args = ["--steps", "40", "--batch", "4", "--log-every", "1", "--save", ck, "--save-every", "20"];
    let (ok, stderr) = mlp_into_closed_pipe(&[&args[..], &["--save-params", params]].concat(), 2);
    assert!(ok, "the run ends well after its reader left:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(std::fs::read_to_string(root.path().join("ck/latest")).unwrap().trim(), "step-00000040");
    assert!(root.path().join("p.safetensors").is_file(), "the parameters are saved");
    let (ok, stderr) = mlp_into_closed_pipe(&["--print-schedule"], 1);
    assert!(ok && !stderr.contains("panicked"), "--print-schedule | head -1:\n{stderr}");
}

#[test]
fn parameters_saved_to_stdout_hold_only_themselves() {
    // `--save-params /dev/stdout > params.safetensors`: the log lines and the report go to
    // stderr, or they would come first in the file and nothing could load it.
    let root = scratch("params-on-stdout");
    let file = root.path().join("p.safetensors");
    let stdout = std::fs::File::create(&file).unwrap();
    let out = Command::new(example("mlp"))
        .args(["--steps", "2", "--batch", "4", "--log-every", "1", "--save-params", "/dev/stdout"])
        .stdout(stdout)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("step      2") && stderr.contains("overlap report"), "the log went to stderr:\n{stderr}");
    let params = common::load_sorted_params(&file);
    assert_eq!(params.iter().map(|(name, ..)| name.as_str()).collect::<Vec<_>>()[..2], ["fc1.bias", "fc1.weight"]);
    // A device both go to (`--save-params /dev/null > /dev/null`) leaves the log where it was.
    let out = Command::new(example("mlp"))
        .args(["--steps", "1", "--batch", "4", "--save-params", "/dev/null"])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !stderr.contains("done:"), "{stderr}");
}

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
fn output_paths_that_cannot_be_written_are_refused_before_step_1() {
    let root = scratch("bad-paths");
    let file = root.path().join("a-file");
    std::fs::write(&file, b"not a folder").unwrap();
    let under = |name: &str| file.join(name).to_str().unwrap().to_string();
    for (flag, path) in [
        ("--trace", under("t.json")),
        ("--timeline", under("t.svg")),
        ("--write-profile", under("p.json")),
        ("--save-params", under("p.safetensors")),
        ("--save", file.to_str().unwrap().to_string()),
        ("--save-params", root.path().to_str().unwrap().to_string()),
    ] {
        let started = Instant::now();
        let (ok, text) = mlp(&["--steps", "1000", "--batch", "4", flag, &path]);
        assert!(!ok, "{flag} {path} was accepted:\n{text}");
        assert!(text.contains("error:") && text.contains(&path), "{flag}: the message names the path:\n{text}");
        assert!(!text.contains("step      1"), "{flag}: refused before the first step:\n{text}");
        assert!(started.elapsed() < Duration::from_secs(20), "{flag}: refused at once");
    }
}

#[test]
fn a_folder_with_another_runs_checkpoints_is_refused_unless_resumed_or_overwritten() {
    let root = scratch("foreign-checkpoints");
    let dir = root.path().join("ck");
    let dir = dir.to_str().unwrap();
    let run = |extra: &[&str]| mlp(&[&["--steps", "2", "--batch", "4", "--save", dir][..], extra].concat());
    assert!(run(&[]).0);
    let (ok, text) = run(&["--seed", "1"]);
    assert!(!ok && text.contains("holds another run's checkpoints (latest, step-00000002)"), "{text}");
    assert!(text.contains("--resume") && text.contains("--overwrite"), "the message says what to do:\n{text}");
    assert_eq!(std::fs::read_to_string(root.path().join("ck/latest")).unwrap().trim(), "step-00000002");
    let (ok, text) = mlp(&["--steps", "4", "--batch", "4", "--save", dir, "--resume", dir]);
    assert!(ok, "continuing the run in place is allowed:\n{text}");
    // A run told to replace them that is then refused at start-up leaves them: here it resumes
    // from a checkpoint of another optimizer.
    let (ok, text) = mlp(&["--steps", "6", "--batch", "4", "--save", &format!("{dir}-other")]);
    assert!(ok, "{text}");
    let refused = ["--overwrite", "--resume", &format!("{dir}-other"), "--optimizer", "adamw", "--steps", "8"];
    let (ok, text) = mlp(&[&["--batch", "4", "--save", dir][..], &refused].concat());
    assert!(!ok && text.contains("adamw"), "{text}");
    assert_eq!(std::fs::read_to_string(root.path().join("ck/latest")).unwrap().trim(), "step-00000004");
    assert!(root.path().join("ck/step-00000004/model.safetensors").exists(), "the replaced run's checkpoint is whole");
    // Nor does it leave the folders it made for its outputs.
    let (fresh, trace) = (root.path().join("new/ck"), root.path().join("traces/a/trace.json"));
    let outputs = ["--save", fresh.to_str().unwrap(), "--trace", trace.to_str().unwrap()];
    let (ok, text) = mlp(&[&["--batch", "4"][..], &refused[1..], &outputs].concat());
    assert!(!ok && text.contains("adamw"), "{text}");
    assert!(
        !root.path().join("new").exists() && !root.path().join("traces").exists(),
        "the empty folders it made are removed"
    );
    let (ok, text) = run(&["--seed", "1", "--overwrite"]);
    assert!(ok, "--overwrite replaces them:\n{text}");
    assert_eq!(std::fs::read_to_string(root.path().join("ck/latest")).unwrap().trim(), "step-00000002");
    assert!(!root.path().join("ck/step-00000004").exists(), "the replaced run's checkpoints are gone");
}

#[test]
fn a_second_job_saving_into_the_same_folder_fails_at_once_naming_the_first() {
    let root = scratch("locked-folder");
    let dir = root.path().join("ck");
    let dir = dir.to_str().unwrap();
    let mut first = Command::new(example("mlp"))
        .args(["--steps", "100000", "--batch", "4", "--log-every", "100000", "--save", dir, "--report", "off"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lock = root.path().join("ck/.lock");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&lock).is_ok_and(|holder| holder.contains("process")) {
        assert!(Instant::now() < deadline, "the first job never took the folder");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, text) = mlp(&["--steps", "2", "--batch", "4", "--save", dir, "--overwrite"]);
    let _ = first.kill();
    let _ = first.wait();
    assert!(!ok, "the second job was let in:\n{text}");
    assert!(text.contains(&format!("is in use by another run (process {}", first.id())), "{text}");
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
fn a_dangling_latest_and_a_missing_data_folder_are_called_what_they_are() {
    let root = scratch("dangling");
    let dir = root.path().join("ck");
    let dir = dir.to_str().unwrap();
    assert!(mlp(&["--steps", "2", "--batch", "4", "--save", dir]).0);
    // Resumed at the total already reached: nothing to train, and where its parameters are.
    let (ok, text) = mlp(&["--steps", "2", "--batch", "4", "--resume", dir]);
    let parameters = format!("{dir}/step-00000002/model.safetensors");
    let nothing = format!("nothing to do (give a larger total to train on; its parameters are in {parameters})");
    assert!(!ok && text.contains(&nothing), "{text}");
    assert!(!text.contains("resumed from"), "nothing was resumed:\n{text}");
    // A parameters file given to --resume, and a checkpoint folder to --init-params, say which is which.
    let params = root.path().join("p.safetensors");
    assert!(mlp(&["--steps", "1", "--batch", "4", "--save-params", params.to_str().unwrap()]).0);
    let (ok, text) = mlp(&["--steps", "4", "--batch", "4", "--resume", params.to_str().unwrap()]);
    assert!(
        !ok && text.contains("is a file, not a checkpoint folder: a parameters file gives a run its first"),
        "{text}"
    );
    let (ok, text) = mlp(&["--steps", "4", "--batch", "4", "--init-params", dir]);
    let folder = format!("--init-params {dir}: a folder, not a parameters file (a checkpoint folder is resumed from");
    assert!(!ok && text.contains(&folder) && text.contains("the parameters alone, in model.safetensors"), "{text}");
    std::fs::remove_dir_all(root.path().join("ck/step-00000002")).unwrap();
    let (ok, text) = mlp(&["--steps", "4", "--batch", "4", "--resume", dir]);
    assert!(!ok && text.contains("`latest` names step-00000002, which is missing"), "{text}");
    let missing = root.path().join("no-such-data");
    let (ok, text) = mlp(&["--steps", "1", "--data", missing.to_str().unwrap()]);
    assert!(!ok && text.contains("no such folder"), "{text}");
}

#[test]
fn resuming_with_another_seed_global_batch_or_optimizer_settings_says_so() {
    let root = scratch("changed-run");
    let dir = root.path().join("ck");
    let dir = dir.to_str().unwrap();
    assert!(mlp(&["--steps", "2", "--batch", "4", "--save", dir]).0);
    let (ok, text) = mlp(&["--steps", "3", "--batch", "8", "--seed", "5", "--resume", dir, "--save", dir]);
    assert!(ok, "{text}");
    assert!(text.contains("warning: resuming with other data: the checkpoint's run read synthetic"), "{text}");
    assert!(text.contains("warning: resuming with another global batch: 4 samples per step before, 8 now"), "{text}");
    let (ok, text) = mlp(&["--steps", "4", "--batch", "8", "--seed", "5", "--resume", dir, "--save", dir]);
    assert!(ok && !text.contains("warning"), "the same run resumes quietly:\n{text}");
    let (ok, text) =
        mlp(&["--steps", "5", "--batch", "8", "--seed", "5", "--lr", "0.01", "--clip-grad-norm", "2", "--resume", dir]);
    assert!(ok, "{text}");
    assert!(
        text.contains(
            "warning: resuming with other optimizer settings: lr: 0.01 (was 0.05), clip grad norm: 2 (was off) \
             (its state is kept)"
        ),
        "{text}"
    );
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
fn a_file_name_too_long_for_the_file_system_is_refused_before_step_1() {
    let root = scratch("long-name");
    let long = "a".repeat(300);
    for flag in ["--save-params", "--trace", "--timeline", "--write-profile"] {
        let (code, text) = mlp_in(root.path(), &[], &["--steps", "3", "--batch", "4", "--log-every", "1", flag, &long]);
        assert_eq!(code, 1, "{flag}:\n{text}");
        assert!(text.contains(flag) && text.contains("File name too long"), "{flag}:\n{text}");
        assert!(!text.contains("step      1"), "{flag}: refused before the first step:\n{text}");
    }
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "the probes leave nothing behind");
}

#[test]
fn a_damaged_data_position_is_a_checkpoint_error_naming_the_state_file() {
    let root = scratch("data-position");
    assert_eq!(mlp_in(root.path(), &[], &["--steps", "2", "--batch", "4", "--report", "off", "--save", "ck"]).0, 0);
    let state = root.path().join("ck/step-00000002/state.json");
    let text = std::fs::read_to_string(&state).unwrap();
    let damaged = text.replace("\"samples_seen\": 8", "\"samples_seen\": 18446744073709551615");
    assert_ne!(damaged, text, "the data position after 2 steps of 4 samples is 8:\n{text}");
    let resume = ["--steps", "4", "--batch", "4", "--report", "off", "--resume", "ck"];
    // The state's own CRC finds the edit.
    std::fs::write(&state, &damaged).unwrap();
    let (code, text) = mlp_in(root.path(), &[], &resume);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("state.json: edited or damaged"), "{text}");
    assert!(!text.contains("panicked") && !text.contains("step      3"), "{text}");
    // A state without a CRC (written before it was recorded) still has its position checked.
    let mut unrecorded: serde_json::Value = serde_json::from_str(&damaged).unwrap();
    assert!(unrecorded.as_object_mut().unwrap().remove("crc32").is_some(), "the state records its CRC");
    std::fs::write(&state, serde_json::to_vec_pretty(&unrecorded).unwrap()).unwrap();
    let (code, text) = mlp_in(root.path(), &[], &resume);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("state.json: the data position, 18446744073709551615 samples"), "{text}");
}

/// A state file signed by another build: one written before a field was recorded (without it),
/// or after one was added (with one this build does not know). Each passes its own CRC.
#[test]
fn a_state_file_with_fewer_or_more_fields_still_passes_its_crc() {
    let root = scratch("state-fields");
    assert_eq!(mlp_in(root.path(), &[], &["--steps", "2", "--batch", "4", "--report", "off", "--save", "ck"]).0, 0);
    let state = root.path().join("ck/step-00000002/state.json");
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    let sign = |mut value: serde_json::Value| {
        let fields = value.as_object_mut().unwrap();
        fields.remove("crc32");
        let crc = crc32fast::hash(&serde_json::to_vec(&fields).unwrap());
        fields.insert("crc32".into(), crc.into());
        std::fs::write(&state, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
    };
    let mut older = written.clone();
    assert!(older["run"].as_object_mut().unwrap().remove("optimizer").is_some(), "the state records the optimizer");
    let mut newer = written.clone();
    newer.as_object_mut().unwrap().insert("recorded_later".into(), serde_json::json!({"value": 1}));
    for (what, value) in [("older", older), ("newer", newer)] {
        sign(value);
        let (code, text) =
            mlp_in(root.path(), &[], &["--steps", "3", "--batch", "4", "--report", "off", "--resume", "ck"]);
        assert_eq!(code, 0, "{what}: {text}");
        assert!(!text.contains("warning"), "{what}: {text}");
    }
}

#[test]
fn a_checkpoint_of_another_schedule_is_refused_or_warned_about() {
    let root = scratch("other-schedule");
    let run = |name: &str, args: &[&str]| {
        let out = Command::new(example(name)).current_dir(root.path()).args(args).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    // PowerSGD's error feedback would be dropped by the same model compiled without PowerSGD.
    let (ok, text) = run("mlp_powersgd", &["--steps", "2", "--batch", "4", "--report", "off", "--save", "psgd"]);
    assert!(ok, "{text}");
    let (ok, text) = run("mlp", &["--steps", "3", "--batch", "4", "--report", "off", "--resume", "psgd"]);
    assert!(!ok && text.contains("PowerSGD's error feedback of 1 rank(s) (powersgd(rank = 4"), "{text}");
    // Another run-time wire format continues, with a warning.
    let (ok, text) = run("mlp", &["--steps", "2", "--batch", "4", "--report", "off", "--save", "plain"]);
    assert!(ok, "{text}");
    let (ok, text) =
        run("mlp", &["--steps", "3", "--batch", "4", "--report", "off", "--resume", "plain", "--grad-comm", "bf16"]);
    assert!(
        ok && text.contains("gradients that travel otherwise: as fp32 before, as bf16 (chosen at run time) now"),
        "{text}"
    );
}

/// A SIGTERM that comes in the last step finds the run at its end: it finishes, with every
/// output, and exits 0; one a step earlier stops it as usual.
#[test]
fn sigterm_in_the_last_step_lets_the_run_finish_with_all_its_outputs() {
    let root = scratch("last-step");
    let args = ["--steps", "3", "--batch", "4", "--report", "off", "--save", "ck", "--save-params", "p.st"];
    let (code, text) = mlp_in(root.path(), &[("OVERLAP_FAULT", "term:0:3")], &args);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("note: SIGTERM came after the last step had begun"), "{text}");
    assert_eq!(std::fs::read_to_string(root.path().join("ck/latest")).unwrap().trim(), "step-00000003");
    assert!(!common::load_sorted_params(&root.path().join("p.st")).is_empty());
    let earlier = scratch("step-before-last");
    let (code, text) = mlp_in(earlier.path(), &[("OVERLAP_FAULT", "term:0:2")], &args);
    assert_eq!(code, 143, "{text}");
    assert!(text.contains("stopped by SIGTERM after step 2"), "{text}");
    assert!(!earlier.path().join("p.st").exists(), "an unfinished run writes no final parameters");
}

/// A parameters file write killed or failed midway leaves the previous file whole, and the next
/// write leaves nothing beside the file.
#[test]
fn a_parameters_file_is_never_left_torn() {
    let root = scratch("params-write");
    let params = root.path().join("p.st");
    std::fs::write(&params, b"the previous run's").unwrap();
    let args = ["--steps", "2", "--batch", "4", "--report", "off", "--save-params", "p.st"];
    let (code, text) = mlp_in(root.path(), &[("OVERLAP_FAULT", "save-params:synced:1")], &args);
    assert_eq!(code, 128 + libc::SIGKILL, "killed before the rename:\n{text}");
    assert_eq!(std::fs::read(&params).unwrap(), b"the previous run's");
    assert_eq!(mlp_in(root.path(), &[], &args).0, 0);
    let written = std::fs::read(&params).unwrap();
    assert!(!common::load_sorted_params(&params).is_empty());
    let names: Vec<_> = std::fs::read_dir(root.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["p.st"], "the killed write's temporary file was replaced and renamed");
    // A write that fails (files limited to 1 MiB, SIGXFSZ ignored) keeps the file it would replace.
    let limited = Command::new("bash")
        .current_dir(root.path())
        .args(["-c", "trap '' XFSZ; ulimit -f 1024; exec \"$0\" \"$@\"", example("mlp").to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&limited.stderr);
    assert!(!limited.status.success() && stderr.contains("p.st: File too large"), "{stderr}");
    assert_eq!(std::fs::read(&params).unwrap(), written, "the previous file is whole");
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1, "the temporary file is removed");
}

#[test]
fn outputs_that_would_overwrite_each_other_or_the_checkpoints_are_refused_up_front() {
    let root = scratch("overlapping-outputs");
    let at = |name: &str| root.path().join(name).to_str().unwrap().to_string();
    let ck = at("ck");
    let cases: [(&[&str], &str); 4] = [
        (&["--save", &ck, "--save-params", &format!("{ck}/latest")], "--save-params"),
        (&["--save", &ck, "--save-params", &ck], "--save-params"),
        (
            &["--trace", &at("out"), "--timeline", &format!("{}/./out", root.path().display())],
            "--trace and --timeline both name",
        ),
        (&["--write-profile", &at("p"), "--save-params", &at("p")], "--save-params and --write-profile both name"),
    ];
    for (args, says) in cases {
        let (ok, text) = mlp(&[&["--steps", "2", "--batch", "4"], args].concat());
        assert!(!ok && text.contains(says), "{args:?} must be refused naming {says}:\n{text}");
        assert!(!text.contains("step      1"), "{args:?}: refused before the first step:\n{text}");
    }
    let (ok, text) = mlp(&["--steps", "2", "--batch", "4", "--save", &ck, "--save-params", &format!("{ck}/latest")]);
    assert!(!ok && text.contains("is in the checkpoint folder") && text.contains("(--save)"), "{text}");
    // Nor in the folder the run resumes from, though it saves elsewhere or not at all.
    let (ok, text) = mlp(&["--steps", "2", "--batch", "4", "--save", &ck]);
    assert!(ok, "{text}");
    let model_file = format!("{ck}/step-00000002/model.safetensors");
    for output in ["--save-params", "--trace"] {
        let (ok, text) = mlp(&["--steps", "3", "--batch", "4", "--resume", &ck, output, &model_file]);
        assert!(!ok && text.contains("is in the checkpoint folder") && text.contains("(--resume)"), "{text}");
    }
    // Nor over another run's checkpoint files, which this run neither saves to nor resumes from;
    // a file of its own beside them is no checkpoint's.
    let canonical = std::path::Path::new(&ck).canonicalize().unwrap();
    for output in ["latest", "step-00000002/model.safetensors"] {
        let (ok, text) = mlp(&["--steps", "2", "--batch", "4", "--save-params", &format!("{ck}/{output}")]);
        let says = format!("{output} is one of the checkpoint folder {}'s own files", canonical.display());
        assert!(!ok && text.contains(&says), "{text}");
    }
    let (ok, text) = mlp(&["--steps", "2", "--batch", "4", "--save-params", &format!("{ck}/final.safetensors")]);
    assert!(ok, "{text}");
    let (ok, text) = mlp(&["--steps", "3", "--batch", "4", "--resume", &ck]);
    assert!(ok, "the checkpoint resumed from is whole: {text}");
    // Nor over the held-out files of the data, though the run reads none of them.
    let data = root.path().join("idx");
    std::fs::create_dir(&data).unwrap();
    let test_images = data.join("t10k-images-idx3-ubyte");
    std::fs::write(&test_images, b"held-out images").unwrap();
    let (data, test_images) = (data.to_str().unwrap(), test_images.to_str().unwrap());
    let (ok, text) = mlp(&["--steps", "1", "--data", data, "--eval-every", "0", "--timeline", test_images]);
    assert!(!ok && text.contains("--timeline") && text.contains("is a held-out file of --data"), "{text}");
    assert_eq!(std::fs::read(test_images).unwrap(), b"held-out images");
    // Nor a trace, a timeline or a profile over the parameters the run starts from; the run's own
    // parameters may replace them.
    let start = root.path().join("start.safetensors");
    let start = start.to_str().unwrap();
    assert!(mlp(&["--steps", "1", "--batch", "4", "--save-params", start]).0);
    let saved = std::fs::read(start).unwrap();
    for output in ["--trace", "--timeline", "--write-profile"] {
        let (ok, text) = mlp(&["--steps", "1", "--batch", "4", "--init-params", start, output, start]);
        assert!(!ok && text.contains(&format!("{output} {start} is the --init-params file")), "{text}");
        assert_eq!(std::fs::read(start).unwrap(), saved, "{output}");
    }
    let (ok, text) = mlp(&["--steps", "1", "--batch", "4", "--init-params", start, "--save-params", start]);
    assert!(ok && std::fs::read(start).unwrap() != saved, "{text}");
}

#[test]
fn a_lock_file_that_is_a_link_is_refused_and_its_target_untouched() {
    let root = scratch("lock-link");
    let (ck, outside) = (root.path().join("ck"), root.path().join("precious.txt"));
    std::fs::create_dir(&ck).unwrap();
    std::fs::write(&outside, b"keep me").unwrap();
    std::os::unix::fs::symlink(&outside, ck.join(".lock")).unwrap();
    let (ok, text) = mlp(&["--steps", "2", "--batch", "4", "--save", ck.to_str().unwrap()]);
    assert!(!ok && text.contains(".lock is a symbolic link"), "{text}");
    assert_eq!(std::fs::read(&outside).unwrap(), b"keep me");
}

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

#[test]
fn a_checkpoint_folder_whose_files_would_not_fit_is_refused_before_step_1() {
    // A folder path of 4064 characters: its own probe fits in PATH_MAX (4096 with the final
    // NUL), `step-00000002/optimizer.safetensors` inside it would not.
    let root = scratch("long-ck");
    let mut dir = root.path().to_path_buf();
    while dir.as_os_str().len() + 201 <= 4064 {
        dir.push("d".repeat(200));
    }
    let last = 4064 - dir.as_os_str().len() - 1;
    dir.push("e".repeat(last));
    assert_eq!(dir.as_os_str().len(), 4064);
    std::fs::create_dir_all(&dir).unwrap();
    let (ok, text) = mlp(&["--steps", "2", "--batch", "4", "--save", dir.to_str().unwrap()]);
    assert!(!ok && text.contains("the checkpoint's files cannot be created there"), "{text}");
    assert!(!text.contains("step      1"), "refused before the first step:\n{text}");
}
