//! Helpers shared by the tests that drive the example binaries under real `mpirun`.
// Each test binary uses some of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

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

/// One job at a time: each already runs more ranks than a small machine has cores.
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn mpirun(args: &[&str]) -> Output {
    mpirun_with_env(&[], args)
}

/// `mpirun args` with extra environment variables for every rank.
pub fn mpirun_with_env(env: &[(&str, &str)], args: &[&str]) -> Output {
    let _turn = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    Command::new("mpirun")
        .envs(env.iter().copied())
        // As root (CI containers) OpenMPI refuses to start without these; harmless otherwise.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .arg("--oversubscribe")
        .args(args)
        .output()
        .expect("mpirun is installed (make deps)")
}

/// Runs `mpirun args`, fails the test with both streams if the job fails, returns stdout.
pub fn mpirun_ok(args: &[&str]) -> String {
    let out = mpirun(args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "mpirun {args:?} failed:\n{stdout}\n{stderr}");
    stdout.into_owned()
}

/// A fresh scratch directory for one test, removed with everything in it when dropped (the
/// checkpoint tests alone write hundreds of megabytes).
pub fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("overlap-test-{tag}-")).tempdir().expect("temp dir is writable")
}
