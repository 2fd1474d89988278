//! The checkpoint folder's housekeeping, with a tiny model through the library: a partial step
//! folder a killed save left behind is removed, never kept as one of the newest in place of a
//! checkpoint; a save that cannot publish `latest` leaves nothing behind; and the pointer's
//! temporary file is never written through a link, nor left to fail a run at its first save; a
//! run replacing another's checkpoints keeps them until it has one of its own; and a checkpoint
//! edited past its CRCs is refused by the checks behind them.

mod common;

use std::path::Path;

use overlap::prelude::*;
use overlap::{Batch, Dataset, ReportFormat, SyntheticClassification};

#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct Tiny {
    fc1: Linear<4, 8>,
    act: Relu,
    head: Linear<8, 3>,
}

/// Synthetic samples that run `during_step_3` when step 4's batch is filled (samples 12.. of 4 a
/// step), which the trainer does ahead, while step 3's updates run: after step 2's save.
struct Hooked<F: FnMut()> {
    samples: SyntheticClassification,
    during_step_3: F,
}

impl<F: FnMut()> Dataset for Hooked<F> {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        if first == 12 {
            (self.during_step_3)();
        }
        Dataset::fill(&mut self.samples, first, rows, batch)
    }

    fn features(&self) -> usize {
        self.samples.features()
    }
}

/// `steps` steps of `Tiny` saving into `dir` every 2 steps (resuming from it if asked).
fn train(dir: &Path, steps: u64, resume: bool, during_step_3: impl FnMut()) -> overlap::Result<TrainSummary> {
    let comm = Communicator::single();
    let mut model = Tiny::new(&comm, 1)?;
    let mut data = Hooked { samples: SyntheticClassification::new(3, 4, 3), during_step_3 };
    let trainer = Trainer::new(&comm).steps(steps).batch(4).report(ReportFormat::Off, None).save(dir, Some(2));
    let trainer = if resume { trainer.resume(dir) } else { trainer };
    trainer.fit(&mut model, &mut data, &CrossEntropyLoss)
}

/// The folder's entries, sorted (the lock file aside).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name != ".lock")
        .collect();
    names.sort();
    names
}

fn latest(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("latest")).unwrap().trim().to_string()
}

/// A stop signal publishes a step between the periodic saves; killed during that save, it
/// leaves a partial folder older than the resumed run's next save. That save keeps the two
/// newest checkpoints, not the partial folder in place of the older one.
#[test]
fn a_partial_step_folder_is_removed_not_kept_as_one_of_the_newest() {
    let root = tempfile::tempdir().unwrap();
    let ck = root.path().join("ck");
    train(&ck, 4, false, || {}).unwrap();
    let partial = ck.join("step-00000003");
    std::fs::create_dir(&partial).unwrap();
    let model = std::fs::read(ck.join("step-00000004/model.safetensors")).unwrap();
    std::fs::write(partial.join("model.safetensors"), &model[..model.len() / 2]).unwrap();
    train(&ck, 6, true, || {}).unwrap();
    assert_eq!(entries(&ck), ["latest", "step-00000004", "step-00000006"]);
}

/// A `latest.tmp` that is a folder fails no run at its first save: it is refused before step 1.
#[test]
fn a_folder_in_the_way_of_the_pointer_is_refused_before_step_1() {
    let root = tempfile::tempdir().unwrap();
    let ck = root.path().join("ck");
    std::fs::create_dir_all(ck.join("latest.tmp")).unwrap();
    let err = train(&ck, 4, false, || panic!("no step runs")).unwrap_err().to_string();
    assert!(err.contains("latest.tmp is in the way: each save writes the new `latest` there first"), "{err}");
}

/// A save that cannot publish `latest` (here a folder put in the way during the run) fails with
/// the path, and removes the step folder it wrote: `latest` still names the previous checkpoint.
#[test]
fn a_save_that_cannot_publish_leaves_no_step_folder() {
    let root = tempfile::tempdir().unwrap();
    let ck = root.path().join("ck");
    let blocker = ck.join("latest.tmp");
    let err = train(&ck, 6, false, || std::fs::create_dir_all(blocker.join("inside")).unwrap()).unwrap_err();
    assert!(err.to_string().contains("latest.tmp"), "{err}");
    assert_eq!(latest(&ck), "step-00000002");
    assert_eq!(entries(&ck), ["latest", "latest.tmp", "step-00000002"]);
}

/// A link at `latest.tmp` is refused up front; one that appears during the run is replaced by
/// the pointer's file, its target untouched.
#[test]
fn the_pointer_is_never_written_through_a_link() {
    let root = tempfile::tempdir().unwrap();
    let (ck, victim) = (root.path().join("ck"), root.path().join("victim.txt"));
    std::fs::write(&victim, "important data\n").unwrap();
    std::fs::create_dir(&ck).unwrap();
    let link = ck.join("latest.tmp");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let err = train(&ck, 4, false, || {}).unwrap_err().to_string();
    assert!(err.contains("latest.tmp is in the way"), "{err}");
    std::fs::remove_file(&link).unwrap();
    train(&ck, 4, false, || std::os::unix::fs::symlink(&victim, &link).unwrap()).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "important data\n");
    assert_eq!(latest(&ck), "step-00000004");
    assert!(std::fs::symlink_metadata(ck.join("latest")).unwrap().is_file(), "`latest` is a file, not the link");
}

/// `checkpoint::save` called by a program of one's own: a position before the folder's latest
/// is refused (publishing it would remove the newer checkpoints as an unfinished save's), the
/// latest itself is kept as it is, and `load` as a rank outside the world is refused.
#[test]
fn saving_an_older_position_by_hand_keeps_the_newer_checkpoints() {
    use overlap::checkpoint::{self, Position, RunAbout};
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let model = Tiny::init(1);
    let optimizer = overlap::Sgd::new(0.1);
    let about = RunAbout::default();
    let at = |step| Position { next_step: step, samples_seen: step * 4 };
    checkpoint::save(&ck, &model, &optimizer, at(4), &about, None).unwrap();
    let error = checkpoint::save(&ck, &model, &optimizer, at(2), &about, None).unwrap_err().to_string();
    assert!(error.contains("its latest checkpoint is of step 4, after this one's step 2"), "{error}");
    assert_eq!(entries(&ck), ["latest", "step-00000004"], "nothing removed, nothing added");
    let again = checkpoint::save(&ck, &model, &optimizer, at(4), &about, None).unwrap();
    assert_eq!(again, ck.join("step-00000004"));
    checkpoint::save(&ck, &model, &optimizer, at(6), &about, None).unwrap();
    assert_eq!(latest(&ck), "step-00000006");
    let (mut restored, mut optimizer) = (Tiny::init(2), overlap::Sgd::new(0.1));
    let error = checkpoint::load(&ck, &mut restored, &mut optimizer, 2, 2).map(|_| ()).unwrap_err().to_string();
    assert!(error.contains("as rank 2 of 2: ranks are numbered from 0"), "{error}");
    let loaded = checkpoint::load(&ck, &mut restored, &mut optimizer, 0, 1).unwrap();
    assert_eq!(loaded.position, at(6));
    // Without `latest`, the newest whole step folder stands for it.
    std::fs::remove_file(ck.join("latest")).unwrap();
    let error = checkpoint::save(&ck, &model, &optimizer, at(2), &about, None).unwrap_err().to_string();
    assert!(error.contains("its newest whole step folder is of step 6, after this one's step 2"), "{error}");
    assert_eq!(entries(&ck), ["step-00000004", "step-00000006"], "nothing removed, nothing added");
}

/// `checkpoint::save` holds the folder's lock while it writes: a run holding the folder refuses
/// it, named; another save into it (every rank of a job calling it) is waited for, so that the
/// two never write one step folder at once.
#[test]
fn a_save_waits_for_another_save_and_is_refused_a_folder_a_run_holds() {
    use overlap::checkpoint::{self, Position, RunAbout};
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    std::fs::create_dir(&ck).unwrap();
    let hold = |holder: &str| {
        std::fs::write(ck.join(".lock"), holder).unwrap();
        let held = std::fs::File::open(ck.join(".lock")).unwrap();
        // SAFETY: `held` is an open descriptor for the duration of the call; flock takes an
        // advisory lock, released when `held` is dropped.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        held
    };
    let (model, optimizer) = (Tiny::init(1), overlap::Sgd::new(0.1));
    let save = |step| {
        let at = Position { next_step: step, samples_seen: step * 4 };
        checkpoint::save(&ck, &model, &optimizer, at, &RunAbout::default(), None)
    };
    let run = hold("process 7 on elsewhere");
    let error = save(4).unwrap_err().to_string();
    assert!(error.contains("is in use by another run (process 7 on elsewhere)"), "{error}");
    assert!(entries(&ck).is_empty(), "nothing written");
    drop(run);
    let released = AtomicBool::new(false);
    std::thread::scope(|s| {
        let other_save = hold("process 9 on here (`checkpoint::save`)");
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(200));
            released.store(true, Ordering::SeqCst);
            drop(other_save);
        });
        save(4).unwrap();
        assert!(released.load(Ordering::SeqCst), "the save waited for the other one to end");
    });
    assert_eq!(latest(&ck), "step-00000004");
}

/// A step folder whose state file cannot be read is neither removed as a killed save's leftover
/// nor counted among the checkpoints kept.
#[test]
fn a_step_folder_that_cannot_be_read_is_left_alone() {
    let root = tempfile::tempdir().unwrap();
    let ck = root.path().join("ck");
    train(&ck, 6, false, || {}).unwrap();
    // A state "file" that is a folder: reading it fails, as it would without permission.
    std::fs::create_dir_all(ck.join("step-00000005/state.json")).unwrap();
    train(&ck, 8, true, || {}).unwrap();
    assert_eq!(entries(&ck), ["latest", "step-00000005", "step-00000006", "step-00000008"]);
}

/// `latest` set back by hand to an older step (as the error for a damaged one advises) is
/// continued only where the newer whole checkpoints may go: a resumed run's saves would remove
/// them as an unfinished save's leftovers. And a run does not save inside another run's step
/// folder, which that run's next save would remove.
#[test]
fn newer_whole_checkpoints_and_another_runs_folders_are_not_removed_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    train(&ck, 6, false, || {}).unwrap();
    assert_eq!(entries(&ck), ["latest", "step-00000004", "step-00000006"]);
    std::fs::write(ck.join("latest"), "step-00000004").unwrap();
    let error = train(&ck, 8, true, || {}).map(|_| ()).unwrap_err().to_string();
    assert!(
        error.contains("its `latest` names step 4, but it also holds whole checkpoints after that one (step-00000006)"),
        "{error}"
    );
    assert_eq!(entries(&ck), ["latest", "step-00000004", "step-00000006"], "nothing removed");
    // Replacing them is a choice the run can make.
    let comm = Communicator::single();
    let mut model = Tiny::new(&comm, 1).unwrap();
    let mut data = SyntheticClassification::new(3, 4, 3);
    let trainer = Trainer::new(&comm).steps(8).batch(4).report(ReportFormat::Off, None).save(&ck, Some(2));
    trainer.overwrite_checkpoints().resume(&ck).fit(&mut model, &mut data, &CrossEntropyLoss).unwrap();
    assert_eq!(latest(&ck), "step-00000008");
    let inside = ck.join("step-00000008");
    let error = train(&inside, 2, false, || {}).map(|_| ()).unwrap_err().to_string();
    assert!(error.contains("is inside the checkpoint folder"), "{error}");
    assert!(!inside.join("latest").exists(), "nothing written in it");
    // A `latest` naming no step folder of its own is no run to continue: the refusal says so.
    let lonely = dir.path().join("lonely");
    std::fs::create_dir(&lonely).unwrap();
    std::fs::write(lonely.join("latest"), "step-00000004").unwrap();
    let error = train(&lonely, 2, false, || {}).map(|_| ()).unwrap_err().to_string();
    assert!(error.contains("no `latest` names one of its step folders"), "{error}");
}

/// Samples that fail from sample `from` on (a file gone mid-run), after noting the folder's
/// entries then.
struct FailingFrom<'a> {
    samples: SyntheticClassification,
    from: u64,
    folder: &'a Path,
    seen: Vec<String>,
}

impl Dataset for FailingFrom<'_> {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        if first >= self.from {
            self.seen = entries(self.folder);
            return Err(overlap::Error::Config("the samples are gone".to_string()));
        }
        Dataset::fill(&mut self.samples, first, rows, batch)
    }

    fn features(&self) -> usize {
        self.samples.features()
    }
}

/// A run replacing another's checkpoints sets them aside as it starts, and removes them with its
/// first published checkpoint: one that fails before then puts them back as it ends.
#[test]
fn a_replacing_run_that_fails_before_its_first_save_puts_the_old_checkpoints_back() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    train(&ck, 2, false, || {}).unwrap();
    assert_eq!(entries(&ck), ["latest", "step-00000002"]);
    let comm = Communicator::single();
    let mut model = Tiny::new(&comm, 1).unwrap();
    let mut data =
        FailingFrom { samples: SyntheticClassification::new(3, 4, 3), from: 8, folder: &ck, seen: Vec::new() };
    let trainer = Trainer::new(&comm).steps(10).batch(4).report(ReportFormat::Off, None).save(&ck, Some(5));
    let error = trainer.overwrite_checkpoints().fit(&mut model, &mut data, &CrossEntropyLoss).unwrap_err();
    assert!(error.to_string().contains("the samples are gone"), "{error}");
    assert_eq!(data.seen, [".replaced"], "set aside while the run trained");
    assert_eq!(entries(&ck), ["latest", "step-00000002"], "put back");
    // One that publishes a checkpoint has replaced them.
    let trainer = Trainer::new(&comm).steps(4).batch(4).report(ReportFormat::Off, None).save(&ck, Some(2));
    let mut data = SyntheticClassification::new(3, 4, 3);
    trainer.overwrite_checkpoints().fit(&mut model, &mut data, &CrossEntropyLoss).unwrap();
    assert_eq!(entries(&ck), ["latest", "step-00000002", "step-00000004"]);
}

/// Killed before its first save, a replacing run leaves the checkpoints it set aside; the next
/// run in the folder puts them back first, so that they are resumed as if it had never started.
#[test]
fn a_replacing_run_killed_before_its_first_save_leaves_the_old_checkpoints_to_resume() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let ck_arg = ck.to_str().unwrap();
    let mlp = common::example("mlp");
    let run = |args: &[&str]| {
        let mut command = std::process::Command::new(&mlp);
        command.args(["--batch", "4", "--report", "off"]).args(args);
        command
    };
    assert!(run(&["--steps", "2", "--save", ck_arg]).output().unwrap().status.success());
    let mut replacing = run(&["--steps", "100000", "--log-every", "1", "--save", ck_arg, "--overwrite"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(replacing.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().contains("step      3/")), "the replacing run trains");
    replacing.kill().unwrap();
    replacing.wait().unwrap();
    assert_eq!(entries(&ck), [".replaced"], "set aside, and nothing published");
    // Read before any run puts them back, the folder says where they are.
    let (mut model, mut optimizer) = (Tiny::init(1), overlap::Sgd::new(0.1));
    let error = overlap::checkpoint::load(&ck, &mut model, &mut optimizer, 0, 1).map(drop).unwrap_err().to_string();
    assert!(error.contains("ended before its first save and left them in") && error.contains(".replaced"), "{error}");
    // A save of one's own does not replace them unasked.
    let at = overlap::checkpoint::Position { next_step: 1, samples_seen: 4 };
    let about = overlap::checkpoint::RunAbout::default();
    let error = overlap::checkpoint::save(&ck, &model, &optimizer, at, &about, None).unwrap_err().to_string();
    assert!(error.contains("holds no checkpoint of its own; a run that was to replace"), "{error}");
    assert_eq!(entries(&ck), [".replaced"]);
    let out = run(&["--steps", "3", "--resume", ck_arg, "--save", ck_arg]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("step 2"), "{text}");
    assert_eq!(entries(&ck), ["latest", "step-00000002", "step-00000003"]);
}

/// Rewrites `file` in the newest step folder of `dir` through `edit` (its tensors by name), and
/// signs the edit in the step's state as a save would: past the CRCs, to the checks behind them.
fn edit_signed(dir: &Path, file: &str, edit: impl FnOnce(&mut std::collections::BTreeMap<String, Vec<f32>>)) {
    let step = dir.join(latest(dir));
    let path = step.join(file);
    let bytes = std::fs::read(&path).unwrap();
    let read = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: std::collections::BTreeMap<String, Vec<f32>> = read
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            (name, view.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())
        })
        .collect();
    let shapes: std::collections::BTreeMap<String, Vec<usize>> =
        read.tensors().into_iter().map(|(name, view)| (name, view.shape().to_vec())).collect();
    edit(&mut tensors);
    let raw: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, values)| {
            (name.clone(), shapes[name].clone(), values.iter().flat_map(|v| v.to_le_bytes()).collect())
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = raw
        .iter()
        .map(|(name, shape, data)| {
            (name.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data).unwrap())
        })
        .collect();
    let written = safetensors::serialize(views, None).unwrap();
    std::fs::write(&path, &written).unwrap();
    edit_state(dir, |state| {
        state["files"][file] = serde_json::json!({"bytes": written.len(), "crc32": crc32fast::hash(&written)})
    });
}

/// Edits the state of the newest step folder of `dir` through `edit`, and signs it as a save does.
fn edit_state(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join(latest(dir)).join("state.json");
    let mut state: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut state);
    common::write_signed_state(&path, state);
}

/// A checkpoint whose optimizer state lacks a parameter's buffers (after steps that made them),
/// or holds a value that is not finite, is refused naming the tensor and file, before anything
/// of the model or the optimizer is changed.
#[test]
fn a_checkpoint_missing_state_or_holding_non_finite_values_is_refused_before_loading_any() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let comm = Communicator::single();
    let run = |trainer: Trainer| {
        let mut model = Tiny::new(&comm, 1).unwrap();
        let mut data = SyntheticClassification::new(3, 4, 3);
        let trainer = trainer.steps(2).batch(4).report(ReportFormat::Off, None).optimizer(OptimizerConfig::adamw(1e-3));
        trainer.save(&ck, None).fit(&mut model, &mut data, &CrossEntropyLoss).unwrap();
    };
    run(Trainer::new(&comm));
    let load = || {
        let mut model = Tiny::new(&comm, 7).unwrap();
        let before = model.param(overlap::plan::ParamRef { layer: 0, param: 0 }).to_vec();
        let mut optimizer = AdamW::new(1e-3);
        let error = overlap::checkpoint::load(&ck, &mut model, &mut optimizer, 0, 1).map(drop).unwrap_err();
        assert_eq!(model.param(overlap::plan::ParamRef { layer: 0, param: 0 }), before, "the model is as it was");
        assert_eq!(optimizer.step_count(), 0, "the optimizer is as it was");
        error.to_string()
    };
    edit_signed(&ck, "optimizer.safetensors", |t| {
        assert!(t.remove("exp_avg.fc1.bias").is_some() && t.remove("exp_avg_sq.fc1.bias").is_some(), "{:?}", t.keys());
    });
    let error = load();
    assert!(
        error.contains(
            "optimizer.safetensors: the optimizer's state lacks `exp_avg.fc1.bias` and `exp_avg_sq.fc1.bias` \
                        (the optimizer has stepped: every parameter has its state)"
        ),
        "{error}"
    );
    // A step count past the run's own (here one that would wrap at the next step).
    edit_state(&ck, |state| state["optimizer_step"] = u64::MAX.into());
    let error = load();
    assert!(error.contains("state.json: the optimizer stepped 18446744073709551615 times in 2 steps"), "{error}");
    std::fs::remove_dir_all(&ck).unwrap();
    run(Trainer::new(&comm));
    edit_signed(&ck, "model.safetensors", |t| t.get_mut("head.weight").unwrap()[5] = f32::NAN);
    let error = load();
    assert!(
        error.contains("model.safetensors: `head.weight` holds NaN at index 5: a parameter must be finite"),
        "{error}"
    );
}

/// A replacing run whose first save finds the disk full gives up the checkpoints it replaces, as
/// it was told to, and saves once more, rather than ending with nothing of its training kept;
/// without such checkpoints the full disk ends the run, as any failed save does.
#[test]
fn a_replacing_runs_first_save_on_a_full_disk_makes_room_with_what_it_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let mlp = common::fault_mlp();
    let run = |ck: &Path, args: &[&str], fault: Option<&str>| {
        let mut command = std::process::Command::new(&mlp);
        command.args(["--batch", "4", "--report", "off", "--save", ck.to_str().unwrap()]).args(args);
        if let Some(fault) = fault {
            command.env("OVERLAP_FAULT", fault);
        }
        let out = command.output().unwrap();
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let ck = dir.path().join("ck");
    assert!(run(&ck, &["--steps", "2"], None).0);
    let (ok, text) = run(&ck, &["--steps", "3", "--seed", "1", "--overwrite"], Some("full-disk:save:1"));
    assert!(ok, "{text}");
    assert_eq!(entries(&ck), ["latest", "step-00000003"]);
    let fresh = dir.path().join("fresh");
    let (ok, text) = run(&fresh, &["--steps", "3"], Some("full-disk:save:1"));
    assert!(!ok && text.contains("No space left on device"), "{text}");
    assert!(text.contains("(a save needs room for one checkpoint beside the 2 it keeps)"), "{text}");
}
