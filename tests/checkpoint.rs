//! Checkpoints: resuming is bitwise-identical to never stopping, a kill at any stage of a save
//! leaves a loadable checkpoint, and damaged or foreign checkpoints are refused with every
//! problem named.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{example, fault_mlp, mpirun_ok, scratch};
use overlap::DistributedModel;
use tempfile::TempDir;

/// Runs `mlp` on `ranks` ranks (directly for 1, under mpirun otherwise).
fn mlp(ranks: usize, args: &[&str], fault: Option<&str>) -> Output {
    // Faults are injected into the mlp example built with fault injection (`fault-mlp`).
    let exe = if fault.is_some() { fault_mlp() } else { example("mlp") };
    let base = ["--batch", "4", "--report", "off", "--log-every", "1000"];
    if ranks == 1 {
        let mut cmd = Command::new(&exe);
        cmd.args(base).args(args);
        if let Some(f) = fault {
            cmd.env("OVERLAP_FAULT", f);
        }
        return cmd.output().expect("the example runs");
    }
    assert!(fault.is_none(), "faults are injected into one-process runs here");
    let n = ranks.to_string();
    let mut all = vec!["-n", &n, exe.to_str().unwrap()];
    all.extend(base);
    all.extend_from_slice(args);
    let stdout = mpirun_ok(&all);
    Output { status: std::process::ExitStatus::default(), stdout: stdout.into_bytes(), stderr: vec![] }
}

fn ok(out: Output) -> String {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    format!("{stdout}{stderr}")
}

fn files(dir: &Path, step: u64) -> (Vec<u8>, Vec<u8>) {
    let d = dir.join(format!("step-{step:08}"));
    (std::fs::read(d.join("model.safetensors")).unwrap(), std::fs::read(d.join("optimizer.safetensors")).unwrap())
}

/// `root/tag`, not created yet: `--save` creates it.
fn fresh(root: &TempDir, tag: &str) -> PathBuf {
    root.path().join(tag)
}

#[test]
fn resuming_is_bitwise_identical_to_not_stopping() {
    let root = scratch("resume");
    for (ranks, optimizer) in [(1, "sgd"), (1, "adamw"), (2, "sgd")] {
        let tag = format!("{ranks}-{optimizer}");
        let (straight, split) = (fresh(&root, &format!("straight-{tag}")), fresh(&root, &format!("split-{tag}")));
        let opt = ["--optimizer", optimizer];
        ok(mlp(ranks, &[&opt[..], &["--steps", "10", "--save", straight.to_str().unwrap()]].concat(), None));
        ok(mlp(ranks, &[&opt[..], &["--steps", "5", "--save", split.to_str().unwrap()]].concat(), None));
        let s = split.to_str().unwrap();
        ok(mlp(ranks, &[&opt[..], &["--steps", "10", "--resume", s, "--save", s]].concat(), None));
        let (a, b) = (files(&straight, 10), files(&split, 10));
        assert!(a.0 == b.0, "{tag}: parameters differ after resuming");
        assert!(a.1 == b.1, "{tag}: optimizer state differs after resuming");
        assert!(a.1.len() > 1000, "{tag}: the optimizer state was saved");
        // Each pair is ~300 MB: keep the disk use of the whole test to one pair.
        std::fs::remove_dir_all(straight).unwrap();
        std::fs::remove_dir_all(split).unwrap();
    }
}

#[test]
fn a_kill_at_any_stage_of_a_save_leaves_a_loadable_checkpoint() {
    let root = scratch("kill");
    let reference = fresh(&root, "kill-reference");
    ok(mlp(1, &["--steps", "6", "--save", reference.to_str().unwrap()], None));
    let stages = ["model-written", "optimizer-written", "state-written", "synced", "pointer-written", "renamed"];
    for stage in stages {
        let dir = fresh(&root, &format!("kill-{stage}"));
        let d = dir.to_str().unwrap();
        // Saves at steps 2 and 4; the second one is killed at `stage`.
        let killed = mlp(1, &["--steps", "6", "--save", d, "--save-every", "2"], Some(&format!("save:{stage}:2")));
        assert!(!killed.status.success(), "{stage}: the fault did not fire");
        let resumed = ok(mlp(1, &["--steps", "6", "--resume", d, "--save", d], None));
        let expected = if stage == "renamed" { 4 } else { 2 };
        assert!(resumed.contains(&format!("at step {expected}")), "{stage}: {resumed}");
        assert!(files(&dir, 6) == files(&reference, 6), "{stage}: resumed run differs from an uninterrupted one");
        std::fs::remove_dir_all(dir).unwrap();
    }
    // Killed during the very first save: there is no checkpoint, and resuming says so.
    let dir = fresh(&root, "kill-first");
    let d = dir.to_str().unwrap();
    assert!(!mlp(1, &["--steps", "2", "--save", d], Some("save:synced:1")).status.success());
    let out = mlp(1, &["--steps", "4", "--resume", d], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no checkpoint in"), "{out:?}");
}

fn resume_error(dir: &Path, exe: &str) -> String {
    let out = Command::new(example(exe))
        .args(["--steps", "4", "--batch", "4", "--report", "off", "--resume", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a bad checkpoint was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn damaged_or_foreign_checkpoints_are_refused_clearly() {
    let root = scratch("damage");
    let good = fresh(&root, "damage-source");
    ok(mlp(1, &["--steps", "2", "--save", good.to_str().unwrap()], None));
    let copy = |tag: &str| {
        let dir = fresh(&root, tag);
        std::fs::create_dir_all(dir.join("step-00000002")).unwrap();
        std::fs::copy(good.join("latest"), dir.join("latest")).unwrap();
        for f in ["model.safetensors", "optimizer.safetensors", "state.json"] {
            std::fs::copy(good.join("step-00000002").join(f), dir.join("step-00000002").join(f)).unwrap();
        }
        dir
    };

    let dir = copy("truncated");
    let model = dir.join("step-00000002/model.safetensors");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
    let err = resume_error(&dir, "mlp");
    assert!(err.contains("model.safetensors: truncated"), "{err}");

    let dir = copy("corrupted");
    let optimizer = dir.join("step-00000002/optimizer.safetensors");
    let mut bytes = std::fs::read(&optimizer).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&optimizer, &bytes).unwrap();
    let err = resume_error(&dir, "mlp");
    assert!(err.contains("optimizer.safetensors: corrupted: CRC-32"), "{err}");

    // A damaged newest checkpoint names the older whole ones, and how to resume from them.
    let dir = copy("missing-file");
    let older = dir.join("step-00000001");
    std::fs::create_dir(&older).unwrap();
    for f in ["model.safetensors", "optimizer.safetensors", "state.json"] {
        std::fs::copy(good.join("step-00000002").join(f), older.join(f)).unwrap();
    }
    std::fs::remove_file(dir.join("step-00000002/state.json")).unwrap();
    let err = resume_error(&dir, "mlp");
    let pointer = dir.join("latest").display().to_string();
    assert!(err.contains("error: checkpoint: ") && err.contains("step-00000002/state.json: "), "{err}");
    let hint = format!(
        "the folder holds other whole checkpoints (step-00000001): to resume from one, write its name into \
         {pointer} (`echo step-00000001 > {pointer}`)"
    );
    assert!(err.contains(&hint), "{err}");

    let dir = copy("bad-state");
    std::fs::write(dir.join("step-00000002/state.json"), b"{\"format\": 3").unwrap();
    assert!(resume_error(&dir, "mlp").contains("not a valid checkpoint state file"));

    let dir = copy("bad-pointer");
    std::fs::write(dir.join("latest"), b"../elsewhere").unwrap();
    let err = resume_error(&dir, "mlp");
    assert!(err.contains("is not a checkpoint directory name"), "{err}");
    // The whole checkpoints left are named, with how to resume from one.
    let pointer = dir.join("latest").display().to_string();
    let hint = format!(
        "the folder holds whole checkpoints (step-00000002): to resume from one, write its name into {pointer}"
    );
    assert!(err.contains(&hint), "{err}");
    // A pointer written over with another file is called that, not undecodable text.
    std::fs::write(dir.join("latest"), vec![0xff; 4000]).unwrap();
    let err = resume_error(&dir, "mlp");
    assert!(
        err.contains("latest: 4000 bytes that are no checkpoint directory name (`step-N`): was it written over?"),
        "{err}"
    );
    assert!(err.contains(&hint), "{err}");

    // Another model: one error counting the missing and unexpected tensors, naming a few of each
    // and every misshapen one.
    let err = resume_error(&good, "custom_layer");
    for expected in [
        "does not fit this run",
        "this is a checkpoint of `Mlp`; this run trains `Classifier`",
        "5 missing tensors: `embed.bias` [256], `embed.weight` [256, 784], `gain.gain` [256], `norm.bias` [256] and 1 more",
        "6 unexpected tensors (the model has no such parameter): `fc1.bias` [2048], `fc1.weight` [2048, 784]",
        "`head.weight` has shape [10, 2048], the model expects [10, 256]",
    ] {
        assert!(err.contains(expected), "lacks {expected}:\n{err}");
    }
    assert_eq!(err.matches("error:").count(), 1, "one error, every problem in it:\n{err}");

    // Another optimizer.
    let out = Command::new(example("mlp"))
        .args(["--steps", "4", "--batch", "4", "--optimizer", "adamw", "--resume", good.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("optimizer `sgd`, this run uses `adamw`"), "{err}");
    assert!(!err.contains("momentum_buffer"), "one line for the optimizer, not one per tensor of its state:\n{err}");
}

fn failed(out: Output) -> String {
    assert!(!out.status.success(), "expected a failure");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `--init-params`: a parameters file (ours, or a PyTorch twin's `state_dict` saved as
/// safetensors) is where training starts, on every rank; a file that does not fit the model is
/// refused as `load_state_dict(strict=True)` refuses it, every difference named.
#[test]
fn a_parameters_file_starts_a_run_when_it_fits_the_model_exactly() {
    let dir = scratch("init-params");
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    ok(mlp(1, &["--steps", "2", "--seed", "9", "--save-params", &path("trained.st")], None));
    // A learning rate that moves nothing: the run ends where it started.
    let keep = ["--steps", "1", "--lr", "1e-30", "--init-params", &path("trained.st")];
    ok(mlp(1, &[&keep[..], &["--save-params", &path("one.st")]].concat(), None));
    mlp(2, &[&keep[..], &["--save-params", &path("two.st")]].concat(), None);
    let trained = common::load_sorted_params(&dir.path().join("trained.st"));
    for started in ["one.st", "two.st"] {
        let from = common::load_sorted_params(&dir.path().join(started));
        assert!(common::max_relative_difference(&from, &trained) < 1e-6, "{started} did not start from the file");
    }
    ok(mlp(1, &["--steps", "1", "--lr", "1e-30", "--save-params", &path("fresh.st")], None));
    let fresh = common::load_sorted_params(&dir.path().join("fresh.st"));
    assert!(common::max_relative_difference(&fresh, &trained) > 1e-3, "without the file, the seed's start");

    // Another model's parameters: every missing and unexpected name, and no training.
    let resmlp = Command::new(example("resmlp"))
        .args(["--steps", "1", "--batch", "4", "--report", "off", "--save-params", &path("resmlp.st")])
        .output()
        .unwrap();
    ok(resmlp);
    let text = failed(mlp(1, &["--steps", "1", "--init-params", &path("resmlp.st")], None));
    assert!(text.contains("resmlp.st does not fit Mlp"), "{text}");
    assert!(text.contains("6 missing tensors: `fc1.bias` [2048], `fc1.weight` [2048, 784]"), "{text}");
    assert!(text.contains("50 unexpected tensors (the model has no such parameter): `blocks.0.fc1.bias`"), "{text}");
    assert!(!text.contains("step      1"), "refused before step 1:\n{text}");

    let text = failed(mlp(1, &["--steps", "1", "--init-params", &path("trained.st"), "--resume", &path("ck")], None));
    assert!(text.contains("--init-params") && text.contains("--resume"), "{text}");
}

/// Each rank reads its own copy of what it resumes, loads and trains on: copies that differ are
/// refused on every rank before step 1, named, instead of training apart (the same step, other
/// values) or failing in a collective with MPI's own error (other steps).
#[test]
fn ranks_that_start_from_other_files_are_refused_before_step_1() {
    let dir = scratch("same-start");
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let exe = example("custom_layer");
    let exe = exe.to_str().unwrap();
    let base = ["--batch", "4", "--report", "off", "--log-every", "1"];
    let one = |args: &[&str]| ok(Command::new(exe).args(base).args(args).output().unwrap());
    one(&["--steps", "2", "--save", &path("at2")]);
    one(&["--steps", "3", "--save", &path("at3")]);
    one(&["--steps", "2", "--lr", "0.5", "--save", &path("other2")]);
    one(&["--steps", "1", "--save-params", &path("seed0.st")]);
    one(&["--steps", "1", "--seed", "5", "--save-params", &path("seed5.st")]);
    let two = |rank0: &[&str], rank1: &[&str]| {
        let mut args = vec!["-n", "1", exe];
        args.extend(base);
        args.extend_from_slice(rank0);
        args.extend([":", "-n", "1", exe]);
        args.extend(base);
        args.extend_from_slice(rank1);
        failed(common::mpirun(&args))
    };
    let text = two(&["--steps", "6", "--resume", &path("at2")], &["--steps", "6", "--resume", &path("at3")]);
    assert!(text.contains("ranks resume at other steps (rank 0 at step 2, rank 1 at step 3)"), "{text}");
    let text = two(&["--steps", "6", "--resume", &path("at2")], &["--steps", "6", "--resume", &path("other2")]);
    assert!(text.contains("rank(s) 1 start from other parameters or optimizer state than rank 0"), "{text}");
    assert!(text.contains("every rank's copy must be the same checkpoint"), "{text}");
    assert!(!text.contains("step      3"), "refused before step 3:\n{text}");
    // One rank's copy is damaged: that rank says why, and the other stops with it.
    let damaged = dir.path().join("damaged");
    std::fs::create_dir_all(damaged.join("step-00000002")).unwrap();
    for file in
        ["latest", "step-00000002/model.safetensors", "step-00000002/optimizer.safetensors", "step-00000002/state.json"]
    {
        std::fs::copy(dir.path().join("at2").join(file), damaged.join(file)).unwrap();
    }
    std::fs::write(damaged.join("step-00000002/model.safetensors"), b"cut short").unwrap();
    let text = two(&["--steps", "6", "--resume", &path("at2")], &["--steps", "6", "--resume", &path("damaged")]);
    assert!(text.contains("rank(s) 1 could not load its copy of the checkpoint"), "{text}");
    assert!(text.contains("model.safetensors"), "rank 1 names what is wrong:\n{text}");
    let text = two(
        &["--steps", "2", "--init-params", &path("seed0.st")],
        &["--steps", "2", "--init-params", &path("seed5.st")],
    );
    assert!(text.contains("start from other parameters or optimizer state"), "{text}");
    assert!(!text.contains("step      1"), "refused before step 1:\n{text}");

    // Texts with other characters: other samples, and token ids that mean other characters.
    std::fs::write(dir.path().join("a.txt"), "the first text, in one file\n".repeat(40)).unwrap();
    std::fs::write(dir.path().join("b.txt"), "THE SECOND TEXT, IN ANOTHER\n".repeat(40)).unwrap();
    let gpt = example("gpt");
    let gpt = gpt.to_str().unwrap();
    let flags = ["--context", "8", "--batch", "2", "--steps", "2", "--eval-every", "0", "--report", "off"];
    let (a, b) = (path("a.txt"), path("b.txt"));
    let mut args = vec!["-n", "1", gpt, "--text", &a];
    args.extend(flags);
    args.extend([":", "-n", "1", gpt, "--text", &b]);
    args.extend(flags);
    let text = failed(common::mpirun(&args));
    assert!(text.contains("rank(s) 1 read other training data than rank 0"), "{text}");
    assert!(!text.contains("step      1"), "refused before step 1:\n{text}");
    // A text that differs in its held-out tail alone: that split is named too.
    let tail = format!("{}the first text, in one FILE\n", "the first text, in one file\n".repeat(39));
    std::fs::write(dir.path().join("c.txt"), tail).unwrap();
    let c = path("c.txt");
    let validated = [&flags[..6], &["--eval-every", "1", "--report", "off"]].concat();
    let mut args = vec!["-n", "1", gpt, "--text", &a];
    args.extend(&validated);
    args.extend([":", "-n", "1", gpt, "--text", &c]);
    args.extend(&validated);
    let text = failed(common::mpirun(&args));
    assert!(text.contains("rank(s) 1 read other held-out data than rank 0"), "{text}");
}

#[overlap::distributed_model]
pub struct Small {
    fc: overlap::Linear<3, 2>,
    act: overlap::Relu,
    head: overlap::Linear<2, 2>,
}

/// `path` loaded into a fresh `Small`: the error's text.
fn refusal(path: &Path) -> String {
    let comm = overlap::Communicator::single();
    let mut model = Small::new(&comm, 1).unwrap();
    overlap::params_file::load_into(&mut model, path).unwrap_err().to_string()
}

/// A file that is not the model's parameters in F32 safetensors says what it looks like: a
/// `torch.save` file, a file cut short (with both lengths), every tensor in another dtype (in
/// one line, not one per tensor), names under DDP's `module.` prefix.
#[test]
fn a_parameters_file_that_does_not_fit_says_what_it_is_instead() {
    let dir = scratch("params-file-kinds");
    let path = |name: &str| dir.path().join(name);
    std::fs::write(path("model.pt"), b"PK\x03\x04 a zip archive, as torch.save writes").unwrap();
    let text = refusal(&path("model.pt"));
    assert!(text.contains("not a safetensors file (") && text.contains("looks like a `torch.save` file"), "{text}");

    let comm = overlap::Communicator::single();
    overlap::params_file::save_params(&Small::new(&comm, 1).unwrap(), &path("whole.st")).unwrap();
    let whole = std::fs::read(path("whole.st")).unwrap();
    std::fs::write(path("cut.st"), &whole[..whole.len() - 6]).unwrap();
    let text = refusal(&path("cut.st"));
    let lengths =
        format!("the file is {} bytes, its header describes {}: it was cut short", whole.len() - 6, whole.len());
    assert!(text.contains(&lengths), "{text}");
    // Cut inside the header: its own length says so.
    let header = u64::from_le_bytes(whole[..8].try_into().unwrap());
    std::fs::write(path("cut-header.st"), &whole[..20]).unwrap();
    let text = refusal(&path("cut-header.st"));
    let lengths =
        format!("the file is 20 bytes, and its header alone takes {header} from its 9th byte: it was cut short");
    assert!(text.contains(&lengths), "{text}");

    let params = common::load_sorted_params(&path("whole.st"));
    let wide: Vec<Vec<u8>> =
        params.iter().map(|(.., v)| v.iter().flat_map(|&x| f64::from(x).to_le_bytes()).collect()).collect();
    let views = params.iter().zip(&wide).map(|((name, shape, _), bytes)| {
        (name.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F64, shape.clone(), bytes).unwrap())
    });
    safetensors::serialize_to_file(views, None, &path("f64.st")).unwrap();
    let text = refusal(&path("f64.st"));
    assert!(
        text.contains("4 tensors are F64, the model expects F32: `fc.bias`, `fc.weight`, `head.bias`, `head.weight`")
            && text.lines().count() == 2,
        "{text}"
    );

    let prefixed: Vec<_> = params.iter().map(|(n, s, v)| (format!("module.{n}"), s.clone(), v.clone())).collect();
    common::write_params(&path("ddp.st"), &prefixed);
    let text = refusal(&path("ddp.st"));
    assert!(text.contains("the names carry DDP's `module.` prefix"), "{text}");
    assert!(text.contains("4 unexpected tensors"), "{text}");
}
