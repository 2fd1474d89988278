//! A rank that dies, panics, hangs or produces NaNs ends the whole job promptly with a non-zero
//! status and a message, never a hang. Under real `mpirun -n 3 --oversubscribe`.

#[path = "../common/mod.rs"]
mod common;
mod left_behind;
mod one_rank_failing;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{fault_mlp, mpirun_timed};
use overlap::prelude::*;
use overlap::{Batch, Dataset, ReportFormat, SyntheticClassification};

/// Runs `mlp` (built with fault injection) on 3 ranks with `fault` injected; returns (succeeded, stderr + stdout, duration).
fn job(fault: Option<&str>, extra: &[&str]) -> (bool, String, Duration) {
    let exe = fault_mlp();
    let mut args = vec!["-n", "3", exe.to_str().unwrap(), "--steps", "12", "--batch", "4", "--report", "off"];
    args.extend_from_slice(extra);
    let env: Vec<(&str, &str)> = fault.iter().map(|f| ("OVERLAP_FAULT", *f)).collect();
    let (out, took) = mpirun_timed(&env, &args);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    (out.status.success(), text, took)
}

/// A rank and a step (1-based, from 2) picked from the clock; printed so a failure can be rerun.
fn random_rank_and_step() -> (usize, u64) {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(7, |d| d.subsec_nanos() as u64);
    ((nanos % 3) as usize, 2 + (nanos / 3) % 9)
}

fn assert_ends_promptly(ok: bool, text: &str, took: Duration, what: &str) {
    println!("{what}: ended in {took:.1?}");
    assert!(!ok, "{what}: the job reported success:\n{text}");
    assert!(took < Duration::from_secs(45), "{what}: took {took:?}:\n{text}");
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
fn rank_0_ended_by_another_ranks_failure_leaves_no_folders_for_outputs_it_never_wrote() {
    // Rank 1 panics at step 2 and MPI_Abort kills rank 0, which runs no clean-up: the folders
    // its checks made for the output files were removed before step 1.
    let dir = tempfile::tempdir().unwrap();
    let (trace, params, ck) =
        (dir.path().join("t/run.json"), dir.path().join("p/params.safetensors"), dir.path().join("ck"));
    let outputs = ["--trace", trace.to_str().unwrap(), "--save-params", params.to_str().unwrap()];
    let save = ["--save", ck.to_str().unwrap()];
    let (ok, text, took) = job(Some("panic:1:2"), &[&outputs[..], &save].concat());
    assert_ends_promptly(ok, &text, took, "rank 1 panicked at step 2");
    assert!(!dir.path().join("t").exists() && !dir.path().join("p").exists(), "{text}");
    // The checkpoint folder held the run's lock, so it may stay, holding nothing else; the next
    // run takes it, and writes every output.
    let left: Vec<_> = std::fs::read_dir(&ck).into_iter().flatten().flatten().map(|e| e.file_name()).collect();
    assert!(left.iter().all(|name| name == ".lock"), "{left:?}");
    let (ok, text, _) = job(None, &[&outputs[..], &save].concat());
    assert!(ok, "{text}");
    assert!(trace.is_file() && params.is_file() && ck.join("latest").is_file(), "{text}");
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
    // Nobody is missing: every rank is inside the slow all-reduce.
    assert!(text.contains("every rank on this node has reached this point and is running"), "{text}");
}

/// Runs `mlp` on 3 ranks (with `extra` flags) with rank 1 stopped (SIGSTOP) at `point` and an 8 s
/// timeout (ample for a busy machine's start-up and steps); the job must end promptly, a waiting
/// rank naming rank 1 as stopped with `expected`.
fn stopped_rank_is_named(point: &str, extra: &[&str], expected: &str) {
    let flags = [&["--comm-timeout", "8s"][..], extra].concat();
    let (ok, text, took) = job(Some(&format!("stop:1:{point}")), &flags);
    assert_ends_promptly(ok, &text, took, &format!("rank 1 stopped at {point}"));
    assert!(text.contains(expected), "{point}: expected `{expected}` in:\n{text}");
    assert!(text.contains("rank 1") && text.contains("its process is stopped by a signal"), "{point}:\n{text}");
}

#[test]
fn a_rank_stopped_before_mpi_starts_is_named_by_the_others() {
    stopped_rank_is_named("mpi-init", &[], "rank 1 has not finished initialising MPI");
}

#[test]
fn a_rank_stopped_before_the_shared_memory_set_up_is_named() {
    stopped_rank_is_named("shared-memory", &[], "rank 1 has not finished setting up communication");
}

#[test]
fn a_rank_stopped_before_the_schedule_handshake_is_named() {
    stopped_rank_is_named(
        "handshake",
        &[],
        "while exchanging schedule fingerprints (--comm-timeout): rank 1 is 1 collective(s) behind",
    );
}

#[test]
fn a_rank_stopped_mid_run_is_named_at_the_wait_point() {
    stopped_rank_is_named("5", &[], "was not reduced within 8s on rank ");
}

/// PowerSGD's compressed buckets wait for a stopped rank one timeout in all, not one each, and
/// say so naming the rank, with overlap and without (without, the wait used to report a dead
/// communication thread). Its first 10 steps are sent whole: rank 1 stops at step 12.
#[test]
fn a_rank_stopped_during_compressed_steps_is_named_after_one_timeout() {
    let exe = common::fault_binary("fault-mlp-powersgd");
    for extra in [&[][..], &["--no-overlap"]] {
        let args =
            [&["-n", "2", exe.to_str().unwrap(), "--steps", "14", "--batch", "2"][..], &["--report", "off"], extra];
        // Three compressed buckets that each waited 20 s took a minute or more.
        let args = [&args.concat()[..], &["--comm-timeout", "20s"]].concat();
        let (out, took) = mpirun_timed(&[("OVERLAP_FAULT", "stop:1:12")], &args);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
        assert_ends_promptly(out.status.success(), &text, took, &format!("PowerSGD {extra:?}"));
        assert!(text.contains("was not reduced within 20s on rank 0"), "{extra:?}:\n{text}");
        assert!(text.contains("rank 1") && text.contains("its process is stopped by a signal"), "{extra:?}:\n{text}");
        assert!(!text.contains("stopped unexpectedly"), "{extra:?}: no thread died:\n{text}");
    }
}

#[test]
fn a_rank_stopped_mid_run_without_overlap_is_named_once_the_timeout_passes() {
    // Without overlap the step waits for every queued all-reduce at once, and only that long.
    stopped_rank_is_named("5", &["--no-overlap"], "was not reduced within 8s on rank ");
}

#[test]
fn rank_0s_checkpoint_write_is_not_counted_as_communication() {
    // The first save takes 16 s, twice the timeout (itself ample for a busy machine's steps);
    // the others wait for it apart.
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let args = ["--save", ck.to_str().unwrap(), "--save-every", "6", "--comm-timeout", "8s"];
    let (ok, text, _) = job(Some("slow-save:16000:1"), &args);
    assert!(ok, "a slow checkpoint write is not a communication timeout:\n{text}");
    assert!(text.contains("checkpoint:"), "{text}");
}

#[test]
fn a_checkpoint_rank_0_fails_to_write_ends_every_rank_at_once_with_its_message() {
    // A full disk at the second save: rank 0's error, and the others' word that it failed,
    // within seconds, not after the 60 s communication timeout.
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let args = ["--save", ck.to_str().unwrap(), "--save-every", "1", "--comm-timeout", "60s"];
    let (ok, text, took) = job(Some("full-disk:save:2"), &args);
    assert_ends_promptly(ok, &text, took, "rank 0's checkpoint write failed");
    assert!(text.contains("rank 0: error: ") && text.contains("No space left on device"), "{text}");
    // What the folder still holds, and what a save needs.
    let kept = format!("nothing of this save is kept, and {} still names step-00000001", ck.join("latest").display());
    assert!(
        text.contains(&kept) && text.contains("(a save needs room for one checkpoint beside the 2 it keeps)"),
        "{text}"
    );
    assert!(text.contains("rank 1: error: checkpoint: rank 0 could not write the checkpoint"), "{text}");
    assert!(!text.contains("--comm-timeout") && !text.contains("behind"), "no rank waited it out:\n{text}");
    // The failed save leaves no part of its step behind; the first stays published.
    assert_eq!(std::fs::read_to_string(ck.join("latest")).unwrap().trim(), "step-00000001");
    assert!(!ck.join("step-00000002").exists(), "the failed save's folder is removed");
    // Step folders no `latest` names cannot be resumed: the refusal says so, and what to do.
    std::fs::remove_file(ck.join("latest")).unwrap();
    std::fs::create_dir(ck.join("step-00000009")).unwrap();
    let save = ["--save", ck.to_str().unwrap(), "--save-every", "4"];
    let (ok, text, _) = job(None, &save);
    let said =
        "holds another run's checkpoints (step-00000001, step-00000009): no `latest` names one of its step folders";
    assert!(!ok && text.contains(said), "{text}");
    assert!(!ok && text.contains("remove them, or replace them with --overwrite"), "{text}");
    let (ok, text, _) = job(None, &[&save[..], &["--overwrite"]].concat());
    assert!(ok, "{text}");
    assert_eq!(std::fs::read_to_string(ck.join("latest")).unwrap().trim(), "step-00000012");
    assert!(!ck.join("step-00000009").exists(), "the unpublished folder is replaced");
}

#[test]
fn a_rank_0_stopped_while_it_writes_a_checkpoint_is_named_after_the_timeout() {
    // A stopped process writes nothing: the others give up after the communication timeout, not
    // the 30 minutes a slow write is given.
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let args = ["--save", ck.to_str().unwrap(), "--save-every", "3", "--comm-timeout", "8s"];
    let (ok, text, took) = job(Some("stop:0:saving"), &args);
    assert_ends_promptly(ok, &text, took, "rank 0 stopped in its checkpoint write");
    assert!(text.contains("while waiting for rank 0 to write a checkpoint (--comm-timeout)"), "{text}");
    assert!(text.contains("rank 0 ") && text.contains("its process is stopped by a signal"), "{text}");
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
    // Sharded, each rank checks its own slice; the ranks agree on the first non-finite sum.
    let (ok, text, took) = job(Some("nan:2:3"), &["--check-finite", "--shard-optimizer"]);
    assert_ends_promptly(ok, &text, took, "NaN gradient, sharded");
    let every_rank = text.matches("non-finite gradient NaN in `head.bias` (element 0) at step 3").count();
    assert_eq!(every_rank, 3, "each of the 3 ranks names it, though rank 0 alone holds its sum:\n{text}");
    // A finite gradient past fp16's range on the wire is named alike.
    let (ok, text, took) = job(Some("huge:2:3"), &["--check-finite", "--grad-comm", "fp16"]);
    assert_ends_promptly(ok, &text, took, "fp16 overflow");
    let said = "the gradient of `head.bias` overflowed fp16 on the wire at step 3: element 0 is inf";
    assert!(text.contains(said), "{text}");
}
