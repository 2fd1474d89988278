//! Helpers shared by the tests that drive the example binaries under real `mpirun`.
// Each test binary uses some of these helpers.
#![allow(dead_code)]

pub mod finite_differences;
pub mod pytorch_plans;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `target/<profile>/examples/<name>`, next to the test's own binary in `deps/`.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let path = exe.parent().and_then(Path::parent).expect("target/<profile>").join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: build the examples first (`cargo build --examples`; `make test` does)",
        path.display()
    );
    path
}

/// Runs example `exe` in `dir` with `args`, on one process: whether it succeeded, its stdout and
/// its stderr.
pub fn run_example(exe: &str, dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(example(exe)).current_dir(dir).args(args).output().expect("the example runs");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// [`run_example`], its stdout and stderr as one text.
pub fn run_example_merged(exe: &str, dir: &Path, args: &[&str]) -> (bool, String) {
    let (ok, stdout, stderr) = run_example(exe, dir, args);
    (ok, stdout + &stderr)
}

/// Writes llm.c token shards of GPT-2 ids into `dir/gpt2`: `tiny_train.bin` (2000 tokens) and
/// `tiny_val.bin` (400), each "The quick brown fox jumps over the lazy dog." and GPT-2's
/// `<|endoftext|>` (50256), over and over.
pub fn write_gpt2_shards(dir: &Path) {
    let sentence = [464u16, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 50256];
    std::fs::create_dir(dir.join("gpt2")).unwrap();
    for (split, count) in [("train", 2000), ("val", 400)] {
        let tokens: Vec<u16> = sentence.iter().copied().cycle().take(count).collect();
        overlap::token_shards::write_shard(&dir.join(format!("gpt2/tiny_{split}.bin")), &tokens).unwrap();
    }
}

/// `fault-mlp`, the `mlp` example built with fault injection (`tests/faults`): the binary whose
/// runs `OVERLAP_FAULT` kills, panics or poisons. The examples themselves ignore the variable.
pub fn fault_mlp() -> PathBuf {
    fault_binary("fault-mlp")
}

/// A binary of `tests/faults` (`fault-mlp`, `fault-mlp-powersgd`).
pub fn fault_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let path = exe.parent().and_then(Path::parent).expect("target/<profile>").join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`; `make test` does)",
        path.display()
    );
    path
}

/// Whether the multi-rank half of a test runs: yes, unless `OVERLAP_TESTS_MPIRUN=off` says its
/// ranks could not start these binaries (the GPU bundle, whose libmpi is the build host's, on a
/// machine with another MPI), which the test prints. Without that, a missing `mpirun` fails the
/// test: the claims these tests make are about ranks, and must not pass unchecked.
pub fn mpirun_available() -> bool {
    if std::env::var("OVERLAP_TESTS_MPIRUN").is_ok_and(|v| v == "off") {
        println!("SKIPPED: the multi-rank half of this test (OVERLAP_TESTS_MPIRUN=off)");
        return false;
    }
    assert!(
        mpirun_usable(),
        "mpirun cannot be started: install OpenMPI (`make deps`), or set OVERLAP_TESTS_MPIRUN=off to skip the \
         multi-rank tests"
    );
    true
}

/// Whether `mpirun` can be started here (GPU machines often have no MPI, and the GPU tests then
/// run one rank), unless `OVERLAP_TESTS_MPIRUN=off`.
pub fn mpirun_usable() -> bool {
    std::env::var("OVERLAP_TESTS_MPIRUN").map_or(true, |v| v != "off")
        && Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// One job at a time: each already runs more ranks than a small machine has cores.
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn mpirun(args: &[&str]) -> Output {
    mpirun_with_env(&[], args)
}

/// `mpirun args` with extra environment variables for every rank.
///
/// A job still running after `JOB_LIMIT` is killed with its whole process group and the test
/// fails with what it printed: a hang (ours, or `mpirun`'s own) is a failure, never a stuck suite.
/// The one exception is mpirun not exiting after it has reported the job's end (`JOB_ABORTED`).
pub fn mpirun_with_env(env: &[(&str, &str)], args: &[&str]) -> Output {
    mpirun_timed(env, args).0
}

/// `mpirun_with_env`, with how long the job itself ran (not the wait for its turn).
pub fn mpirun_timed(env: &[(&str, &str)], args: &[&str]) -> (Output, Duration) {
    let _turn = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut child = Command::new("mpirun")
        .envs(env.iter().copied())
        // As root (CI containers) OpenMPI refuses to start without these; harmless otherwise.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .arg("--oversubscribe")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("mpirun is installed (make deps)");
    // Read as the job runs, so that the loop below sees what mpirun has said so far.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        let read = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&read);
        let reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                into.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).extend_from_slice(&chunk[..n]);
            }
        });
        (read, reader)
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let said_aborted = || {
        [&stdout.0, &stderr.0].iter().any(|read| {
            let text = read.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            String::from_utf8_lossy(&text).contains(JOB_ABORTED)
        })
    };
    let kill_the_group = |child: &mut std::process::Child| {
        // SAFETY: kill() has no memory-safety preconditions; the group is mpirun's own
        // (process_group(0) made it), holding mpirun and its ranks.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
    };
    let started = Instant::now();
    let mut aborted_at = None;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for mpirun") {
            break Some(status);
        }
        aborted_at = aborted_at.or_else(|| said_aborted().then(Instant::now));
        if aborted_at.is_some_and(|at| at.elapsed() > TEARDOWN_GRACE) {
            kill_the_group(&mut child);
            // The job's own outcome: a rank failed, and mpirun said so.
            break Some(std::os::unix::process::ExitStatusExt::from_raw(1 << 8));
        }
        if started.elapsed() > JOB_LIMIT {
            kill_the_group(&mut child);
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let collect = |(read, reader): (Arc<Mutex<Vec<u8>>>, std::thread::JoinHandle<()>)| {
        let _ = reader.join();
        std::mem::take(&mut *read.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    };
    let (stdout, stderr) = (collect(stdout), collect(stderr));
    let Some(status) = status else {
        panic!(
            "mpirun {args:?} was still running after {JOB_LIMIT:?} and was killed:\n{}\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )
    };
    (Output { status, stdout, stderr }, started.elapsed())
}

/// The longest any one test job may run: far beyond any test's need on a busy machine.
const JOB_LIMIT: Duration = Duration::from_secs(300);

/// What mpirun prints once it has ended a job because a rank failed. OpenMPI 4.1's mpirun has
/// been seen, on a busy machine, not to exit after it (its daemon's teardown stuck, once with
/// "PMIX ERROR: UNREACHABLE"), every rank's error already printed: the job is over as far as the
/// program is concerned, so `TEARDOWN_GRACE` later it is killed and judged by what it printed.
const JOB_ABORTED: &str = "mpirun detected that one or more processes exited with non-zero status";
/// How long mpirun gets to exit after saying `JOB_ABORTED`: it takes well under a second.
const TEARDOWN_GRACE: Duration = Duration::from_secs(10);

/// Runs `mpirun args`, fails the test with both streams if the job fails, returns stdout.
pub fn mpirun_ok(args: &[&str]) -> String {
    let out = mpirun(args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "mpirun {args:?} failed:\n{stdout}\n{stderr}");
    stdout.into_owned()
}

/// A model's parameters as `load_params` gives them: name, shape, values.
pub type Params = Vec<(String, Vec<usize>, Vec<f32>)>;

/// The parameters in a safetensors file, sorted by name (as `load_params` gives them).
pub fn load_sorted_params(file: &Path) -> Params {
    let params = overlap::params_file::load_params(file).expect("a readable parameters file");
    assert!(params.windows(2).all(|w| w[0].0 < w[1].0), "load_params sorts by name");
    params
}

/// Writes `params` as a safetensors file with no metadata, as a program of one's own (or
/// PyTorch's `save_file`) would.
pub fn write_params(file: &Path, params: &Params) {
    let bytes: Vec<Vec<u8>> = params.iter().map(|(.., v)| v.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
    let views = params.iter().zip(&bytes).map(|((name, shape, _), b)| {
        (name.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), b).unwrap())
    });
    safetensors::serialize_to_file(views, None, file).expect("a parameters file written");
}

/// Largest per-tensor relative difference `|a - b| / |b|` (Euclidean norms); the tensors must
/// have the same names and shapes.
pub fn max_relative_difference(a: &Params, b: &Params) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|((na, sa, va), (nb, sb, vb))| {
            assert_eq!((na, sa), (nb, sb));
            let diff: f64 = va.iter().zip(vb).map(|(x, y)| f64::from(x - y).powi(2)).sum::<f64>().sqrt();
            let norm: f64 = vb.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>().sqrt();
            diff / norm.max(f64::MIN_POSITIVE)
        })
        .fold(0.0, f64::max)
}

/// A fresh scratch directory for one test, removed with everything in it when dropped (the
/// checkpoint tests alone write hundreds of megabytes).
pub fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("overlap-test-{tag}-")).tempdir().expect("temp dir is writable")
}

/// Writes `state` to the checkpoint state file `path`, signed as a save signs it (its CRC over
/// its other fields): an edit that passes the CRC, to reach the checks behind it.
pub fn write_signed_state(path: &Path, mut state: serde_json::Value) {
    let fields = state.as_object_mut().expect("a state is a JSON object");
    fields.remove("crc32");
    let crc = crc32fast::hash(&serde_json::to_vec(&fields).unwrap());
    fields.insert("crc32".into(), crc.into());
    std::fs::write(path, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
}

/// The file name of a training shard `prepare` wrote into `folder`.
pub fn training_shard(folder: &Path) -> String {
    std::fs::read_dir(folder)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .find(|name| name.contains("_train"))
        .expect("a training shard")
}

/// Runs this test binary's ignored test `name` alone in a process of its own, and fails unless
/// it passed: nothing else of this binary (another test, the harness reporting one) runs beside it.
pub fn run_alone(name: &str) {
    let exe = std::env::current_exe().expect("test binary path");
    let out = std::process::Command::new(exe)
        .args(["--exact", name, "--include-ignored", "--nocapture", "--color", "never", "--test-threads", "1"])
        .output()
        .expect("the test binary starts again");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success() && text.contains("test result: ok. 1 passed"), "{name} alone:\n{text}");
}

/// Runs this test binary's ignored test `name` on 2 ranks under mpirun, once with each gradient
/// transport and once without overlap, and fails unless it passed on both ranks each time. The
/// ranks get their communicator from [`two_rank_communicator`]. Each rank's output goes to a file
/// of its own (`--output-filename`): merged, two ranks' lines can interleave mid-line.
pub fn run_on_two_ranks_each_way(name: &str) {
    for (transport, mode) in [("shared-memory", "overlap"), ("mpi", "overlap"), ("shared-memory", "no-overlap")] {
        run_on_ranks(name, 2, transport, mode);
    }
}

/// Runs this test binary's ignored test `name` on `ranks` ranks under mpirun with `transport`
/// and `mode` (as [`run_on_two_ranks_each_way`] names them), and fails unless every rank passed.
/// The ranks get their communicator from [`test_communicator`].
pub fn run_on_ranks(name: &str, ranks: usize, transport: &str, mode: &str) {
    let exe = std::env::current_exe().expect("test binary path");
    let outputs = scratch("ranks");
    let env = [("OVERLAP_TEST_TRANSPORT", transport), ("OVERLAP_TEST_MODE", mode)];
    let dir = outputs.path().to_str().expect("a UTF-8 temp path");
    let n = ranks.to_string();
    let args = ["--output-filename", dir, "-n", &n, exe.to_str().unwrap(), "--exact", name, "--include-ignored"];
    let out = mpirun_with_env(&env, &[&args[..], &["--nocapture", "--color", "never", "--test-threads", "1"]].concat());
    let stdouts = rank_stdouts(outputs.path());
    let run = format!("{ranks} ranks, {transport}, {mode}");
    println!("{run}:\n{}", stdouts.join("\n"));
    assert!(out.status.success(), "{run}: {stdouts:?}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdouts.len(), ranks, "{run}: one output file per rank");
    for stdout in &stdouts {
        assert!(stdout.contains("test result: ok. 1 passed"), "{run}: a rank did not pass:\n{stdout}");
    }
}

/// The `stdout` files that `mpirun --output-filename DIR` left under `dir` (`DIR/<job>/rank.N/`),
/// in rank order.
fn rank_stdouts(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|n| n == "stdout") {
                files.push(path);
            }
        }
    }
    files.sort();
    files.iter().map(|f| std::fs::read_to_string(f).expect("a rank's output file")).collect()
}

/// The communicator of a rank started by [`run_on_two_ranks_each_way`].
pub fn two_rank_communicator() -> overlap::Communicator {
    let comm = test_communicator();
    assert_eq!(comm.world_size(), 2, "run under mpirun -n 2");
    comm
}

/// The communicator of a rank started by [`run_on_ranks`]: its transport and mode.
pub fn test_communicator() -> overlap::Communicator {
    let transport = match std::env::var("OVERLAP_TEST_TRANSPORT").as_deref() {
        Ok("mpi") => overlap::Transport::Mpi,
        _ => overlap::Transport::SharedMemory,
    };
    let mode = match std::env::var("OVERLAP_TEST_MODE").as_deref() {
        Ok("no-overlap") => overlap::CommMode::AfterBackward,
        _ => overlap::CommMode::Overlap,
    };
    let comm = overlap::Communicator::from_env_with(transport).unwrap().with_mode(mode);
    assert_eq!(comm.transport(), Some(transport));
    comm
}
