//! Inputs that used to lose a run or be ignored: a closed stdout, output paths that cannot be
//! written, a checkpoint folder holding another run or used by a running job, flags that
//! contradict each other, counts past any memory, a damaged data position, a stop signal in
//! the last step and a parameters file write cut short. Each is refused up front with a
//! message, or survived.

mod checkpoints;
#[path = "../common/mod.rs"]
mod common;
mod outputs;
mod settings;

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
