//! A rank that dies, panics, hangs or produces NaNs ends the whole job promptly with a non-zero
//! status and a message, never a hang. Under real `mpirun -n 3 --oversubscribe`.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{example, mpirun_with_env};

/// Runs `mlp` on 3 ranks with `fault` injected; returns (succeeded, stderr + stdout, duration).
fn job(fault: Option<&str>, extra: &[&str]) -> (bool, String, Duration) {
    let exe = example("mlp");
    let mut args = vec!["-n", "3", exe.to_str().unwrap(), "--steps", "12", "--batch", "4", "--report", "off"];
    args.extend_from_slice(extra);
    let env: Vec<(&str, &str)> = fault.iter().map(|f| ("OVERLAP_FAULT", *f)).collect();
    let started = Instant::now();
    let out = mpirun_with_env(&env, &args);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    (out.status.success(), text, started.elapsed())
}

/// A rank and a step (1-based, from 2) picked from the clock; printed so a failure can be rerun.
fn random_rank_and_step() -> (usize, u64) {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(7, |d| d.subsec_nanos() as u64);
    ((nanos % 3) as usize, 2 + (nanos / 3) % 9)
}

fn assert_ends_promptly(ok: bool, text: &str, took: Duration, what: &str) {
    println!("{what}: ended in {took:.1?}");
    assert!(!ok, "{what}: the job reported success:\n{text}");
    assert!(took < Duration::from_secs(30), "{what}: took {took:?}:\n{text}");
}

#[test]
fn a_killed_rank_ends_the_job() {
    let (rank, step) = random_rank_and_step();
    let (ok, text, took) = job(Some(&format!("kill:{rank}:{step}")), &[]);
    assert_ends_promptly(ok, &text, took, &format!("rank {rank} killed at step {step}"));
    assert!(text.contains("signal 9") || text.contains("Killed"), "mpirun names the cause:\n{text}");
}

#[test]
fn a_panicking_rank_ends_the_job_with_its_message() {
    let (rank, step) = random_rank_and_step();
    let (ok, text, took) = job(Some(&format!("panic:{rank}:{step}")), &[]);
    assert_ends_promptly(ok, &text, took, &format!("rank {rank} panicked at step {step}"));
    assert!(text.contains(&format!("fault injected: rank {rank} panics at step {step}")), "{text}");
}

#[test]
fn a_panicking_communication_thread_is_an_error_not_a_hang() {
    let (ok, text, took) = job(Some("comm-panic:1:5"), &[]);
    assert_ends_promptly(ok, &text, took, "communication thread panicked");
    assert!(text.contains("rank 1: error: the communication thread stopped unexpectedly"), "{text}");
}

#[test]
fn a_wait_past_the_timeout_names_the_bucket_and_rank() {
    // 1 MB/s makes b0's 16 MiB (head and fc3) take far longer than the timeout.
    let (ok, text, took) = job(None, &["--link", "bandwidth=1MB/s", "--comm-timeout", "1s"]);
    assert_ends_promptly(ok, &text, took, "comm timeout");
    assert!(text.contains("gradient bucket b0 was not reduced within 1s on rank "), "{text}");
}

#[test]
fn a_non_finite_gradient_names_the_parameter_and_step() {
    let (ok, text, took) = job(Some("nan:2:3"), &["--check-finite"]);
    assert_ends_promptly(ok, &text, took, "NaN gradient");
    // The NaN spreads through backward, so b0's first element is already NaN: head.bias, the
    // first gradient backward produces.
    assert!(text.contains("non-finite gradient NaN in `head.bias` (element 0) at step 3"), "{text}");
    let (ok, text, _) = job(None, &["--check-finite"]);
    assert!(ok, "finite gradients pass the check:\n{text}");
}
