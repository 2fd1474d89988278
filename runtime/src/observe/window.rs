//! How many steps' spans a rank records between gathers to rank 0, and what recording holds
//! there: sizes the recorder's buffer, and lets a run refuse recording it could not hold before
//! step 1.

use overlap_plan::Schedule;

use super::config::ObserveConfig;
use crate::memory::RunShape;
use crate::trace::{self, Span};

/// The most steps between gathers when no `--report-every` is given.
const DEFAULT_WINDOW: u64 = 100;

/// The fewest steps between gathers when no `--report-every` is given, however many spans a step
/// records: a gather is a collective pause, and a sharded run's step after one is left out of
/// the report.
const MIN_WINDOW: u64 = 10;

/// The spans a rank records between gathers when no `--report-every` is given (within
/// `MIN_WINDOW..=DEFAULT_WINDOW` steps): a window's spans are held several times over while
/// they are gathered (the recorder's buffer, the words sent, every rank's decoded spans), which
/// is most of what recording adds to a rank's peak memory. Measured on the gpt example (124
/// spans a step, one process, 400 steps): 100-step windows peaked 3.0 MiB above a run without
/// recording, these (33 steps) 1.4 MiB.
const WINDOW_SPANS: u64 = 1 << 12;

/// The most spans reserved up front: a longer window (a huge `--report-every` or
/// `--accumulate`) lets the buffer grow in its first window instead, and keeps the size it grew to.
pub(super) const RESERVED_SPANS: usize = 1 << 18;

/// Spans one rank records per step, as its buffer is sized: two per layer and micro-step, three
/// per bucket, four more; `None` past the address space.
pub(super) fn spans_per_step(schedule: &Schedule, accumulate: usize) -> Option<usize> {
    let layers = schedule.layers.len().checked_mul(2)?.checked_mul(accumulate)?;
    layers.checked_add(schedule.buckets.len().checked_mul(3)?.checked_add(4)?)
}

/// Steps between gathers: `--report-every`, else as many as record about `WINDOW_SPANS` spans,
/// within `MIN_WINDOW..=DEFAULT_WINDOW`. Every rank computes the same from the same schedule.
pub(super) fn window(config: &ObserveConfig, spans_per_step: Option<usize>) -> u64 {
    config.report_every.unwrap_or_else(|| {
        let per_step = spans_per_step.map_or(u64::MAX, |n| (n as u64).max(1));
        (WINDOW_SPANS / per_step).clamp(MIN_WINDOW, DEFAULT_WINDOW)
    })
}

/// What recording holds at rank 0, in bytes (`None`: past any address space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordingBytes {
    /// Steps gathered at once (`--report-every`, else `window`'s default, at most the run).
    pub window_steps: u64,
    /// Spans one rank records per step, as its buffer is sized (`None`: past the address space).
    pub spans_per_step: Option<usize>,
    /// One window's spans from every rank while they are gathered, decoded and as sent.
    pub window: Option<u64>,
    /// Every span of the run, kept for `--trace` (0 without one).
    pub trace: Option<u64>,
}

/// What recording `config` over `run` on `world` ranks holds at rank 0 (nothing is recorded
/// unless `config.records()`).
pub fn recording_bytes(config: &ObserveConfig, schedule: &Schedule, run: &RunShape, world: usize) -> RecordingBytes {
    let per_step = spans_per_step(schedule, run.accumulate);
    let window_steps = window(config, per_step).min(run.steps);
    let span = std::mem::size_of::<Span>() as u64;
    let of_every_rank = |steps: u64, bytes_per_span: u64| -> Option<u64> {
        (per_step? as u64).checked_mul(steps)?.checked_mul(world as u64)?.checked_mul(bytes_per_span)
    };
    RecordingBytes {
        window_steps,
        spans_per_step: per_step,
        window: of_every_rank(window_steps, span + trace::span::WORDS as u64 * 8),
        trace: if config.trace.is_some() { of_every_rank(run.steps, span) } else { Some(0) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_hold_about_the_same_spans_within_their_bounds_unless_the_user_chose() {
        let default = ObserveConfig::default();
        // The gpt example's 124 spans a step; the mlp's 23; a deep model's thousands.
        assert_eq!(window(&default, Some(124)), 33);
        assert_eq!(window(&default, Some(23)), DEFAULT_WINDOW);
        assert_eq!(window(&default, Some(4000)), MIN_WINDOW);
        assert_eq!(window(&default, Some(0)), DEFAULT_WINDOW);
        assert_eq!(window(&default, None), MIN_WINDOW, "past the address space");
        let chosen = ObserveConfig { report_every: Some(7), ..ObserveConfig::default() };
        assert_eq!(window(&chosen, Some(124)), 7);
        assert_eq!(window(&chosen, Some(1)), 7);
    }
}
