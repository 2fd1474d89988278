//! Stopping cleanly on SIGTERM or SIGINT: what schedulers send before preemption (Slurm, then
//! SIGKILL after its KillWait), what `mpirun` sends its ranks when it gets either, and Ctrl-C.
//! The handler only records the signal. At the end of each step the ranks agree whether any of
//! them got one (a one-number all-reduce), so that all stop after the same step; the `Trainer`
//! then writes a checkpoint if the run saves, and returns `Error::Stopped`. A second signal
//! ends the process at once, with status 128 + signal.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;
use signal_hook::SigId;

use crate::comm::Communicator;
use crate::error::{Error, Result};

/// The handlers, installed for the run and removed after it.
pub(crate) struct StopSignals {
    seen: Arc<AtomicBool>,
    signal: Arc<AtomicUsize>,
    handlers: Vec<SigId>,
}

impl StopSignals {
    pub(crate) fn install() -> Result<Self> {
        let (seen, signal) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let mut handlers = Vec::new();
        for sig in [SIGTERM, SIGINT] {
            let failed = |e: std::io::Error| Error::Config(format!("installing the handler of signal {sig}: {e}"));
            // In registration order: a second signal exits; the first is only recorded.
            handlers.push(flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&seen)).map_err(failed)?);
            handlers.push(flag::register_usize(sig, Arc::clone(&signal), sig as usize).map_err(failed)?);
            handlers.push(flag::register(sig, Arc::clone(&seen)).map_err(failed)?);
        }
        Ok(StopSignals { seen, signal, handlers })
    }

    /// After a step, on every rank: the signal one of the ranks got, if any (collective).
    pub(crate) fn agreed(&self, comm: &Communicator) -> Result<Option<i32>> {
        let mine = if self.seen.load(Ordering::SeqCst) { self.signal.load(Ordering::SeqCst) } else { 0 };
        if comm.world_size() == 1 {
            return Ok((mine != 0).then_some(mine as i32));
        }
        if comm.sum_f64(mine as f64)? == 0.0 {
            return Ok(None);
        }
        let all = comm.all_gather_u64(mine as u64)?;
        Ok(all.into_iter().find(|&s| s != 0).map(|s| s as i32))
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        for id in self.handlers.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// `SIGTERM`, `SIGINT`, or the number.
pub fn signal_name(signal: i32) -> String {
    match signal {
        SIGTERM => "SIGTERM".into(),
        SIGINT => "SIGINT".into(),
        other => format!("signal {other}"),
    }
}
