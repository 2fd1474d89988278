//! How the communication thread waits (and the GPU backend's host, for its GPU): it shares the
//! cores with the compute threads, so after a few back-to-back checks it sleeps between them,
//! longer and longer.

use std::time::{Duration, Instant};

/// Checks `done` until it holds (`true`) or `give_up` does (`false`).
///
/// The checks run back to back for `spin` (what is awaited may be microseconds away); then the
/// thread sleeps between checks, from `FIRST_SLEEP` doubling up to `LONGEST_SLEEP`, leaving the
/// core to compute.
pub(crate) fn wait_until(spin: Duration, mut done: impl FnMut() -> bool, give_up: impl Fn() -> bool) -> bool {
    let started = Instant::now();
    let mut sleeps = 0u32;
    loop {
        if done() {
            return true;
        }
        if give_up() {
            return false;
        }
        if started.elapsed() < spin {
            std::hint::spin_loop();
        } else {
            sleeps = (sleeps + 1).min(8);
            std::thread::sleep((FIRST_SLEEP * (1 << sleeps) / 2).min(LONGEST_SLEEP));
        }
    }
}

/// The first and the longest sleep between checks of an unfinished operation.
const FIRST_SLEEP: Duration = Duration::from_micros(10);
const LONGEST_SLEEP: Duration = Duration::from_micros(160);

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn returns_once_done_and_gives_up_when_told() {
        let calls = Cell::new(0);
        assert!(wait_until(
            Duration::ZERO,
            || {
                calls.set(calls.get() + 1);
                calls.get() == 100
            },
            || false
        ));
        assert_eq!(calls.get(), 100);
        assert!(!wait_until(Duration::from_secs(1), || false, || true));
    }
}
