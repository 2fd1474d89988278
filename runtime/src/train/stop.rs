//! Stopping cleanly on SIGTERM or SIGINT: what schedulers send before preemption (Slurm, then
//! SIGKILL after its KillWait), what `mpirun` sends its ranks when it gets either, and Ctrl-C.
//! During a run the handler only records the signal. At the end of each step the ranks agree
//! whether any of them got one (a one-number all-reduce), so that all stop after the same step
//! (when sharded parameters are all-gathered in the next forward, the vote is queued before the
//! step's backward instead, so as not to wait behind those all-gathers: a signal after it stops
//! the run one step later, unless it cut a validation pass short, after which the ranks vote again;
//! with gradient accumulation they also vote between micro-steps, and a stop there leaves the
//! step out, since nothing is updated before its last micro-step: `run::Run::steps`);
//! the `Trainer` then writes a checkpoint if the run saves, and returns `Error::Stopped`. A
//! validation pass after the step stops at its next batch (`validation::HeldOutLoss::CutShort`). A
//! signal during the last step stops nothing: the run has reached its end, and finishes with
//! every output it writes (only a validation pass then measuring stops early, and the summary
//! reports no held-out loss). A second signal ends the process at once, with status 128 + signal.
//!
//! The handlers are installed once per process and stay: outside a run they perform the
//! signal's default action (the process ends, as if they were not there), so a program that
//! calls `fit` keeps its usual behaviour before and after.
//!
//! A launcher can die without passing a signal on: OpenMPI's `mpirun` sends its ranks SIGTERM
//! only a second after its own first SIGINT or SIGTERM (`odls_base_sigkill_timeout`), and a
//! second one inside that second makes it exit at once. Its ranks would train on with nowhere to
//! print until the MPI library ends them mid-step about a second later. So a rank started by a
//! launcher asks the kernel for SIGHUP when its parent (the launcher, or its node daemon) dies,
//! and stops on it as on SIGTERM: after the step in flight, with a checkpoint. SIGHUP, not
//! SIGTERM, because the kernel sends it once per exiting thread of a multi-threaded parent (the
//! launcher is one): it is recorded, and never counts as the second signal that ends a rank at
//! once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::flag;

use crate::comm::{Communicator, PendingSum};
use crate::error::{Error, Result};

/// What the handlers read and write.
struct Flags {
    /// No run is listening: the signal's default action applies.
    outside_a_run: Arc<AtomicBool>,
    /// A signal arrived during this run.
    seen: Arc<AtomicBool>,
    /// Which one.
    signal: Arc<AtomicUsize>,
}

/// Installs the handlers the first time; later calls reuse them.
fn flags() -> Result<&'static Flags> {
    static FLAGS: OnceLock<Flags> = OnceLock::new();
    static INSTALLING: Mutex<()> = Mutex::new(());
    if let Some(flags) = FLAGS.get() {
        return Ok(flags);
    }
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(flags) = FLAGS.get() {
        return Ok(flags);
    }
    let flags = Flags {
        outside_a_run: Arc::new(AtomicBool::new(true)),
        seen: Arc::new(AtomicBool::new(false)),
        signal: Arc::new(AtomicUsize::new(0)),
    };
    for sig in [SIGTERM, SIGINT] {
        let failed = |e: std::io::Error| Error::Config(format!("installing the handler of signal {sig}: {e}"));
        // In registration order: outside a run, the default action; a second signal exits; the
        // first is recorded.
        flag::register_conditional_default(sig, Arc::clone(&flags.outside_a_run)).map_err(failed)?;
        flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&flags.seen)).map_err(failed)?;
        flag::register_usize(sig, Arc::clone(&flags.signal), sig as usize).map_err(failed)?;
        flag::register(sig, Arc::clone(&flags.seen)).map_err(failed)?;
    }
    if crate::comm::launched_by_mpirun() {
        let failed = |e: std::io::Error| Error::Config(format!("installing the handler of SIGHUP: {e}"));
        flag::register_conditional_default(SIGHUP, Arc::clone(&flags.outside_a_run)).map_err(failed)?;
        let (seen, signal) = (Arc::clone(&flags.seen), Arc::clone(&flags.signal));
        let record = move || {
            let _ = signal.compare_exchange(0, SIGHUP as usize, Ordering::SeqCst, Ordering::SeqCst);
            seen.store(true, Ordering::SeqCst);
        };
        // SAFETY: the action only performs atomic operations, which are async-signal-safe; it
        // allocates, locks and blocks nothing.
        unsafe { signal_hook::low_level::register(SIGHUP, record) }.map_err(failed)?;
    }
    // A rank blocked on a log line nobody reads after the signal stops waiting for it.
    crate::process::console::give_up_waiting_when(Arc::clone(&flags.seen));
    Ok(FLAGS.get_or_init(|| flags))
}

/// Listening for a stop during one run; dropping it stops listening.
pub(crate) struct StopSignals {
    flags: &'static Flags,
}

impl StopSignals {
    pub(crate) fn install() -> Result<Self> {
        let flags = flags()?;
        flags.seen.store(false, Ordering::SeqCst);
        flags.signal.store(0, Ordering::SeqCst);
        flags.outside_a_run.store(false, Ordering::SeqCst);
        if crate::comm::launched_by_mpirun() {
            stop_when_the_launcher_dies();
        }
        Ok(StopSignals { flags })
    }

    /// The signal this process got during the run, if any (not collective).
    pub(crate) fn received(&self) -> Option<i32> {
        let flags = self.flags;
        let signal = flags.signal.load(Ordering::SeqCst);
        (flags.seen.load(Ordering::SeqCst) && signal != 0).then_some(signal as i32)
    }

    /// On every rank: starts counting the ranks that got a signal (collective), for `agreed`.
    /// At the end of a step, or before its backward when anything the step queues later would
    /// delay it (the sharded state's all-gathers for the next forward).
    pub(crate) fn start_vote(&self, comm: &Communicator) -> Result<PendingSum> {
        comm.start_sum_f64(f64::from(self.received().unwrap_or(0)))
    }

    /// After a step, on every rank: the signal one of the ranks got by `start_vote`, if any
    /// (collective); a later one is seen after the next step.
    pub(crate) fn agreed(&self, comm: &Communicator, vote: PendingSum) -> Result<Option<i32>> {
        let mine = self.received().unwrap_or(0);
        if comm.world_size() == 1 {
            return Ok((mine != 0).then_some(mine));
        }
        if comm.finish_sum(vote)? == 0.0 {
            return Ok(None);
        }
        let all = comm.all_gather_u64(mine as u64)?;
        Ok(all.into_iter().find(|&s| s != 0).map(|s| s as i32))
    }
}

/// SIGHUP from the kernel when this process's parent ends (Linux); elsewhere nothing.
fn stop_when_the_launcher_dies() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_PDEATHSIG takes one integer argument, a signal number, and only sets which
    // signal this process gets when its parent ends; a failure leaves it unset (the launcher's
    // own handling applies, as without this call).
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, SIGHUP as libc::c_ulong);
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        self.flags.outside_a_run.store(true, Ordering::SeqCst);
    }
}
