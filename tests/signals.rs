//! Signals to `mpirun` under a real launch: the ranks stop after the step in flight with a
//! checkpoint, whether `mpirun` passes the signal on or dies before it can.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::{example, scratch};

/// Starts `mpirun launch exe args` with its output piped, and reads its stdout up to the line
/// holding `until`.
fn start_job(launch: &[&str], exe: &Path, args: &[&str], until: &str) -> (Child, BufReader<ChildStdout>) {
    let mut job = Command::new("mpirun")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(launch)
        .arg(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun starts");
    let mut stdout = BufReader::new(job.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains(until) {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the job ended before `{until}`");
    }
    (job, stdout)
}

fn signal(job: &Child, signal: i32) {
    // SAFETY: kill() has no memory-safety preconditions; it signals the child this test started.
    assert_eq!(unsafe { libc::kill(job.id() as i32, signal) }, 0);
}

/// The processes whose command line holds `marker`, from /proc.
fn processes_naming(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(marker)
        })
        .collect()
}

fn latest_step(ck: &Path) -> u64 {
    let latest = std::fs::read_to_string(ck.join("latest")).unwrap_or_else(|e| panic!("{}/latest: {e}", ck.display()));
    latest.trim().trim_start_matches("step-").parse().unwrap()
}

/// SIGTERM to `mpirun` mid-run, which passes it on to every rank: the ranks finish the step in
/// flight, agree on it, write a checkpoint and end with 128 + 15; resumed from there, the run
/// ends with the parameters of a run never interrupted, bit for bit.
#[test]
fn sigterm_mid_run_checkpoints_and_a_resume_equals_an_uninterrupted_run() {
    let root = scratch("preempted");
    let (ck, exe) = (root.path().join("ck"), example("mlp"));
    let (ck_arg, exe_arg) = (ck.to_str().unwrap(), exe.to_str().unwrap());
    let (whole, resumed) = (root.path().join("whole.safetensors"), root.path().join("resumed.safetensors"));
    let (whole, resumed) = (whole.to_str().unwrap(), resumed.to_str().unwrap());
    let common = ["--batch", "4", "--report", "off"];
    // Measured with OpenMPI 4.1: mpirun passes SIGTERM on to the ranks after its
    // odls_base_sigkill_timeout (1 s by default) and sends SIGKILL after as long again.
    let launch = ["--oversubscribe", "--mca", "odls_base_sigkill_timeout", "3", "-n", "3"];
    let args = [&common[..], &["--steps", "100000", "--log-every", "1", "--save", ck_arg]].concat();
    let (job, mut stdout) = start_job(&launch, &exe, &args, "step     10/");
    signal(&job, libc::SIGTERM);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let out = job.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job was stopped, not finished:\n{rest}\n{stderr}");
    assert!(stderr.contains("stopped by SIGTERM after step"), "stdout after the signal:\n{rest}\nstderr:\n{stderr}");
    assert_eq!(stderr.matches("stopped by SIGTERM").count(), 1, "one message, from rank 0:\n{stderr}");
    let stopped_at = latest_step(&ck);
    assert!(stopped_at >= 10, "stopped after step {stopped_at}");

    // Both runs end 5 steps after the checkpoint: one from it, one from the start.
    let steps = (stopped_at + 5).to_string();
    let resume = [&common[..], &["--steps", &steps, "--resume", ck_arg, "--save-params", resumed]].concat();
    common::mpirun_ok(&[&["-n", "3", exe_arg][..], &resume].concat());
    common::mpirun_ok(&[&["-n", "3", exe_arg][..], &common, &["--steps", &steps, "--save-params", whole]].concat());
    let read = |file: &str| common::load_sorted_params(Path::new(file));
    assert!(read(resumed) == read(whole), "stopped at {stopped_at} and resumed, the run differs");
}

/// `mpirun` stops reading its ranks' output once it has a signal, and passes the signal on only
/// `odls_base_sigkill_timeout` later: a rank 0 logging every fast step fills its pipe meanwhile
/// and waits on a log line. Once the signal reaches it, that wait is given up (the lines are
/// dropped), so that the step ends and the checkpoint is written before the SIGKILL.
#[test]
fn a_rank_waiting_on_a_log_line_nobody_reads_still_checkpoints_on_sigterm() {
    let root = scratch("chatty");
    let (ck, text, exe) = (root.path().join("ck"), root.path().join("t.txt"), example("gpt"));
    std::fs::write(&text, "the quick brown fox jumps over the lazy dog, again and again.\n".repeat(200)).unwrap();
    let args = [
        "--text",
        text.to_str().unwrap(),
        "--context",
        "16",
        "--batch",
        "2",
        "--eval-every",
        "0",
        "--report",
        "off",
        "--steps",
        "100000000",
        "--log-every",
        "1",
        "--save",
        ck.to_str().unwrap(),
    ];
    let launch = ["--oversubscribe", "--mca", "odls_base_sigkill_timeout", "4", "-n", "2"];
    let (job, mut stdout) = start_job(&launch, &exe, &args, "step     20/");
    signal(&job, libc::SIGTERM);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let out = job.wait_with_output().unwrap();
    assert!(!out.status.success(), "the job was stopped, not finished");
    let latest = ck.join("latest");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(latest.exists(), "no checkpoint after the signal; stderr:\n{stderr}");
    assert!(latest_step(&ck) >= 20, "stopped after step {}", latest_step(&ck));
}

/// Two SIGINTs 0.1 s apart make `mpirun` exit at once without passing anything on (it sends
/// SIGTERM only a second after the first). Its ranks then get SIGHUP from the kernel, as asked
/// at start-up: they stop after the step in flight with a checkpoint that resumes, and are gone
/// within seconds, instead of training on silently until the MPI library ends them mid-step.
#[test]
fn two_sigints_that_end_mpirun_at_once_still_stop_the_ranks_with_a_checkpoint() {
    let root = scratch("two-sigints");
    let (ck, exe) = (root.path().join("ck"), example("custom_layer"));
    let ck_arg = ck.to_str().unwrap();
    let args = ["--batch", "4", "--report", "off", "--steps", "100000", "--log-every", "1", "--save", ck_arg];
    let (job, _stdout) = start_job(&["--oversubscribe", "-n", "3"], &exe, &args, "step      5/");
    signal(&job, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(100));
    signal(&job, libc::SIGINT);
    let out = job.wait_with_output().unwrap();
    assert!(!out.status.success(), "mpirun was interrupted");
    let gone_by = Instant::now() + Duration::from_secs(60);
    while !processes_naming(ck_arg).is_empty() {
        assert!(Instant::now() < gone_by, "ranks still running a minute after mpirun ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stopped_at = latest_step(&ck);
    assert!((5..100_000).contains(&stopped_at), "stopped after step {stopped_at}");
    let steps = (stopped_at + 1).to_string();
    let resume = ["--batch", "4", "--report", "off", "--steps", &steps, "--resume", ck_arg];
    common::mpirun_ok(&[&["-n", "3", exe.to_str().unwrap()][..], &resume].concat());
}

/// SIGTERM while the ranks measure the held-out loss (here a pass far longer than any grace
/// period a scheduler gives): the pass stops at its next batch, the ranks stop after the step,
/// with its checkpoint, as they would between two steps.
#[test]
fn sigterm_during_validation_stops_it_and_the_run_with_a_checkpoint() {
    let root = scratch("validating");
    let (ck, exe) = (root.path().join("ck"), example("mlp"));
    let ck_arg = ck.to_str().unwrap();
    let args = ["--batch", "4", "--report", "off", "--steps", "100000", "--log-every", "1", "--save", ck_arg];
    let validation = ["--eval-every", "3", "--eval-batches", "100000000"];
    // mpirun ends the ranks with SIGKILL 3 s after it passes SIGTERM on.
    let launch = ["--oversubscribe", "--mca", "odls_base_sigkill_timeout", "3", "-n", "2"];
    // Sharded state votes before backward, so the pass's signal needs a vote of its own. A
    // scheduler may signal one rank alone: the other's pass stops too.
    let (sharded, overwrite) = (&["--shard-optimizer", "--overwrite"][..], &["--overwrite"][..]);
    for (mode, one_rank) in [(&[][..], false), (sharded, false), (overwrite, true)] {
        let (job, mut stdout) = start_job(&launch, &exe, &[&args[..], &validation, mode].concat(), "step      3/");
        std::thread::sleep(Duration::from_millis(300));
        if one_rank {
            let ranks: Vec<u32> = processes_naming(ck_arg).into_iter().filter(|&p| p != job.id()).collect();
            assert_eq!(ranks.len(), 2, "two ranks: {ranks:?}");
            // SAFETY: kill() has no memory-safety preconditions; it signals a rank of this job.
            assert_eq!(unsafe { libc::kill(ranks[1] as i32, libc::SIGTERM) }, 0);
        } else {
            signal(&job, libc::SIGTERM);
        }
        // A pass that does not stop would never end: end the job after a minute instead.
        let (finished, pid) = (std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)), job.id() as i32);
        let watchdog = std::thread::spawn({
            let finished = finished.clone();
            move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !finished.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                if !finished.load(std::sync::atomic::Ordering::SeqCst) {
                    // SAFETY: as above; the job has not been waited for, so the pid is still its.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        });
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        let out = job.wait_with_output().unwrap();
        finished.store(true, std::sync::atomic::Ordering::SeqCst);
        watchdog.join().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("stopped by SIGTERM after step 3"),
            "{mode:?}: stdout after the signal:\n{rest}\nstderr:\n{stderr}"
        );
        assert!(rest.contains("step      3  validation cut short by a stop signal ("), "{mode:?}: {rest}");
        assert_eq!(latest_step(&ck), 3, "{mode:?}: the checkpoint of the step validated");
    }
}

#[overlap::distributed_model(bucket_cap_mb = 0.0005, first_bucket_mb = 0.0005)]
pub struct Tiny {
    fc1: overlap::Linear<6, 16>,
    act: overlap::Relu,
    head: overlap::Linear<16, 3>,
}

/// Synthetic samples; rank 1 sends itself SIGTERM while it reads step 3's batch (which the
/// trainer fills ahead, during step 2), as a scheduler would signal one rank.
struct TermOnRank1AtStep3 {
    samples: overlap::SyntheticClassification,
    rank: usize,
}

impl overlap::Dataset for TermOnRank1AtStep3 {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut overlap::Batch) -> overlap::Result<()> {
        // Step 3 begins at global sample 2 steps × 2 ranks × 4 = 16 (rank 1 reads from 20).
        if self.rank == 1 && first == 20 {
            // SAFETY: raise() has no memory-safety preconditions; the Trainer's handler only
            // records the signal.
            unsafe { libc::raise(libc::SIGTERM) };
        }
        overlap::Dataset::fill(&mut self.samples, first, rows, batch)
    }

    fn features(&self) -> usize {
        self.samples.features()
    }
}

/// One rank of `a_library_run_stopped_by_a_signal_names_the_same_checkpoint_on_every_rank`.
#[test]
#[ignore = "run on 2 ranks by a_library_run_stopped_by_a_signal_names_the_same_checkpoint_on_every_rank"]
fn stop_on_a_signal_to_rank_1() {
    use overlap::prelude::*;
    let dir = std::env::var("OVERLAP_TEST_DIR").expect("the checkpoint folder");
    let comm = Communicator::from_env().unwrap();
    let mut model = Tiny::new(&comm, 3).unwrap();
    let mut data = TermOnRank1AtStep3 { samples: overlap::SyntheticClassification::new(5, 6, 3), rank: comm.rank() };
    let fitted = Trainer::new(&comm)
        .steps(8)
        .batch(4)
        .report(overlap::ReportFormat::Off, None)
        .save(&dir, None)
        .stop_on_signals()
        .fit(&mut model, &mut data, &CrossEntropyLoss);
    match fitted {
        Err(overlap::Error::Stopped { step, checkpoint: Some(checkpoint), .. }) => {
            println!("rank {} stopped after step {step} with {}", comm.rank(), checkpoint.display());
        }
        other => panic!("rank {}: {other:?}", comm.rank()),
    }
}

/// Both ranks of a library run stop after the same step and name the same checkpoint folder
/// (the one rank 0 wrote), whichever rank the signal reached.
#[test]
fn a_library_run_stopped_by_a_signal_names_the_same_checkpoint_on_every_rank() {
    let dir = scratch("library-stop");
    let exe = std::env::current_exe().expect("test binary path");
    let name = "stop_on_a_signal_to_rank_1";
    let ck = dir.path().join("ck");
    let args = ["-n", "2", exe.to_str().unwrap(), "--exact", name, "--include-ignored", "--nocapture"];
    let out = common::mpirun_with_env(&[("OVERLAP_TEST_DIR", ck.to_str().unwrap())], &args);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let step = latest_step(&ck);
    let expected = ck.join(format!("step-{step:08}"));
    for rank in [0, 1] {
        let line = format!("rank {rank} stopped after step {step} with {}", expected.display());
        assert!(text.contains(&line), "`{line}` in:\n{text}");
    }
}

/// Runs `exe` (a fault binary) under `mpirun -n ranks` with `fault`; returns its exit status and
/// everything it printed.
fn fault_job(ranks: &str, exe: &Path, fault: Option<&str>, args: &[&str]) -> (Option<i32>, String) {
    let env: Vec<(&str, &str)> = fault.iter().map(|f| ("OVERLAP_FAULT", *f)).collect();
    let out = common::mpirun_with_env(&env, &[&["-n", ranks, exe.to_str().unwrap()][..], args].concat());
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// A signal between the micro-steps of a step (`--accumulate`) stops the run there, before
/// anything is updated: the checkpoint holds the step before, and a resumed run, which does that
/// step whole, ends with the parameters of a run never interrupted, bit for bit. On 2 ranks
/// with sharded optimizer state, the signal reaching rank 1 alone.
#[test]
fn a_stop_between_micro_steps_leaves_the_step_out_and_a_resume_equals_an_uninterrupted_run() {
    let root = scratch("micro-step-stop");
    let exe = common::fault_mlp();
    let path = |name: &str| root.path().join(name).to_str().unwrap().to_string();
    let (ck, whole, resumed) = (path("ck"), path("whole.safetensors"), path("resumed.safetensors"));
    fn args<'a>(more: &[&'a str]) -> Vec<&'a str> {
        let run = ["--batch", "4", "--report", "off", "--accumulate", "3", "--shard-optimizer", "--optimizer", "adamw"];
        [&run[..], &["--steps", "5"], more].concat()
    }
    let (code, text) = fault_job("2", &exe, Some("term:1:3:2"), &args(&["--save", &ck]));
    assert_ne!(code, Some(0), "{text}");
    assert!(
        text.contains("note: SIGTERM came during step 3, after 2 of its 3 micro-steps: the step is left out"),
        "{text}"
    );
    assert!(text.contains("stopped by SIGTERM after step 2: checkpoint"), "{text}");
    assert_eq!(latest_step(Path::new(&ck)), 2, "{text}");
    let (code, text) = fault_job("2", &exe, None, &args(&["--resume", &ck, "--save-params", &resumed]));
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = fault_job("2", &exe, None, &args(&["--save-params", &whole]));
    assert_eq!(code, Some(0), "{text}");
    let read = |file: &str| common::load_sorted_params(Path::new(file));
    assert!(read(&resumed) == read(&whole), "stopped between micro-steps and resumed, the run differs");
}

/// PowerSGD's error feedback lives in the gradient buckets the micro-steps sum into, so a signal
/// between them stops the run after that step, as without `--accumulate`.
#[test]
fn with_powersgd_a_stop_between_micro_steps_waits_for_the_step_end() {
    let root = scratch("micro-step-stop-powersgd");
    let exe = common::fault_binary("fault-mlp-powersgd");
    let ck = root.path().join("ck");
    let args = ["--batch", "4", "--report", "off", "--accumulate", "3", "--steps", "5", "--save", ck.to_str().unwrap()];
    let (code, text) = fault_job("2", &exe, Some("term:0:2:2"), &args);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("stopped by SIGTERM after step 2: checkpoint") && !text.contains("micro-steps"), "{text}");
    assert_eq!(latest_step(&ck), 2);
}
