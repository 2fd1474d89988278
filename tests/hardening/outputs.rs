//! What a run writes: to a closed stdout, to paths that cannot be written or that would
//! overwrite each other, a parameters file cut short, the outputs of a run stopped in its last
//! step.

use super::*;

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
    // A timeline takes a name of its format (`.svg`) alone: a parameters file named so, too.
    let start_svg = root.path().join("start.svg");
    std::fs::copy(start, &start_svg).unwrap();
    let start_svg = start_svg.to_str().unwrap();
    for (output, start) in [("--trace", start), ("--timeline", start_svg), ("--write-profile", start)] {
        let (ok, text) = mlp(&["--steps", "1", "--batch", "4", "--init-params", start, output, start]);
        assert!(!ok && text.contains(&format!("{output} {start} is the --init-params file")), "{text}");
        assert_eq!(std::fs::read(start).unwrap(), saved, "{output}");
    }
    let (ok, text) = mlp(&["--steps", "1", "--batch", "4", "--timeline", root.path().join("t.png").to_str().unwrap()]);
    assert!(!ok && text.contains("the timeline is drawn as SVG"), "{text}");
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
