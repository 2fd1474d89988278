//! One time zero for every rank's spans. Each rank used to start its clock as it left a barrier,
//! which the scheduler lets ranks do at different moments: under load their zeros differed by up
//! to tens of milliseconds, shifting the ranks' rows of the timeline and the trace against each
//! other. Ranks on one machine share `CLOCK_MONOTONIC`, the clock `Instant` reads on Linux, so
//! they take rank 0's reading of it as their zero. Ranks of several machines (told apart by the
//! kernel's boot id) keep their own zero, set as they leave the barrier.

use std::time::{Duration, Instant};

use overlap_plan::Fnv;

use crate::comm::Communicator;
use crate::error::Result;

/// This rank's time zero for the trace: the instant rank 0 read its clock, where every rank runs
/// on rank 0's machine. Collective: every rank calls it.
pub fn common_epoch(comm: &Communicator) -> Result<Instant> {
    comm.barrier()?;
    crate::fault::at_trace_start(comm.rank());
    let (now, mine) = (Instant::now(), monotonic_ns());
    let boots = comm.all_gather_u64(boot_id())?;
    let readings = comm.all_gather_u64(mine.unwrap_or(0))?;
    let one_machine = boots[0] != 0 && boots.iter().all(|&b| b == boots[0]);
    Ok(match mine {
        Some(mine) if one_machine => epoch_at(now, mine, readings[0]),
        _ => now,
    })
}

/// The instant at which a clock that read `mine` at `now` read `root`.
fn epoch_at(now: Instant, mine: u64, root: u64) -> Instant {
    if mine >= root {
        now.checked_sub(Duration::from_nanos(mine - root)).unwrap_or(now)
    } else {
        now.checked_add(Duration::from_nanos(root - mine)).unwrap_or(now)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock `Instant` reads on Linux.
fn monotonic_ns() -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// A hash of the running kernel's boot id, the same for every process of one machine (and
/// boot); 0 where it cannot be read.
fn boot_id() -> u64 {
    match std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        Ok(id) if !id.trim().is_empty() => {
            let mut hash = Fnv::new();
            hash.str(id.trim());
            hash.finish().max(1)
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_read_later_or_earlier_finds_the_same_instant() {
        let now = Instant::now();
        assert_eq!(epoch_at(now, 5_000, 5_000), now);
        assert_eq!(epoch_at(now, 35_000_000, 5_000_000), now - Duration::from_millis(30));
        assert_eq!(epoch_at(now, 5_000_000, 35_000_000), now + Duration::from_millis(30));
        assert!(monotonic_ns().is_some() && boot_id() != 0, "Linux has both");
    }
}
