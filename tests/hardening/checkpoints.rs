//! Checkpoint folders that hold another run, are used by a running job, or hold damaged or
//! foreign state: each refused or warned about by name, before step 1.

use super::*;

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
    let sign = |value: serde_json::Value| common::write_signed_state(&state, value);
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
