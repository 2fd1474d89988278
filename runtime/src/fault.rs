//! Fault injection for the reliability tests: `OVERLAP_FAULT` makes a run die at a chosen
//! point, so tests can check what survives. Only with the `fault-injection` feature, which
//! only this repository's tests (and the examples they run) enable; without it every check is
//! a constant `false`. With it but unset, every check is one read of a value parsed once.
//!
//! - `save:<stage>:<n>`: SIGKILL this process at `<stage>` of its `n`-th checkpoint save
//!   (stages: see `SaveStage`).
//! - `kill:<rank>:<step>` / `panic:<rank>:<step>`: rank `rank` is SIGKILLed / panics when step
//!   `step` (1-based) begins.
//! - `comm-panic:<rank>:<n>`: rank `rank`'s communication thread panics at its `n`-th all-reduce.
//! - `nan:<rank>:<step>`: rank `rank` puts a NaN into its loss gradient at step `step`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Points of a checkpoint save, in the order they happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveStage {
    /// The parameters file is written (not yet synced).
    ModelWritten,
    /// The optimizer file is written.
    OptimizerWritten,
    /// The state file is written: the step directory is complete but not yet synced.
    StateWritten,
    /// The step directory and its files are synced; `latest` still names the previous one.
    Synced,
    /// `latest.tmp` is written and synced, not yet renamed over `latest`.
    PointerWritten,
    /// `latest` was renamed; the directory entry is not yet synced.
    Renamed,
}

impl SaveStage {
    pub const ALL: [SaveStage; 6] = [
        SaveStage::ModelWritten,
        SaveStage::OptimizerWritten,
        SaveStage::StateWritten,
        SaveStage::Synced,
        SaveStage::PointerWritten,
        SaveStage::Renamed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SaveStage::ModelWritten => "model-written",
            SaveStage::OptimizerWritten => "optimizer-written",
            SaveStage::StateWritten => "state-written",
            SaveStage::Synced => "synced",
            SaveStage::PointerWritten => "pointer-written",
            SaveStage::Renamed => "renamed",
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Fault {
    Save { stage: &'static str, nth: u64 },
    Kill { rank: usize, step: u64 },
    Panic { rank: usize, step: u64 },
    CommPanic { rank: usize, nth: u64 },
    Nan { rank: usize, step: u64 },
}

fn fault() -> Option<&'static Fault> {
    if !cfg!(feature = "fault-injection") {
        return None;
    }
    static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
    FAULT.get_or_init(|| std::env::var("OVERLAP_FAULT").ok().and_then(|spec| parse(&spec))).as_ref()
}

fn parse(spec: &str) -> Option<Fault> {
    let mut parts = spec.split(':');
    let (kind, a, b) = (parts.next()?, parts.next()?, parts.next()?.parse::<u64>().ok()?);
    let rank = || a.parse::<usize>().ok();
    Some(match kind {
        "save" => Fault::Save { stage: SaveStage::ALL.iter().find(|s| s.name() == a)?.name(), nth: b },
        "kill" => Fault::Kill { rank: rank()?, step: b },
        "panic" => Fault::Panic { rank: rank()?, step: b },
        "comm-panic" => Fault::CommPanic { rank: rank()?, nth: b },
        "nan" => Fault::Nan { rank: rank()?, step: b },
        _ => return None,
    })
}

fn kill_self() -> ! {
    // SAFETY: raise() has no memory-safety preconditions; SIGKILL cannot be caught, so the
    // process ends here exactly as `kill -9` would end it.
    unsafe { libc::raise(libc::SIGKILL) };
    std::process::abort()
}

/// Counts this process's checkpoint saves: returns the number (1-based) of the one starting.
pub fn next_save() -> u64 {
    static SAVES: AtomicU64 = AtomicU64::new(0);
    SAVES.fetch_add(1, Ordering::Relaxed) + 1
}

/// Called at each stage of the `nth` (1-based) checkpoint save.
pub fn at_save_stage(stage: SaveStage, nth: u64) {
    if fault() == Some(&Fault::Save { stage: stage.name(), nth }) {
        kill_self();
    }
}

/// Called when step `step` (0-based) begins on `rank`.
pub fn at_step(rank: usize, step: u64) {
    match fault() {
        Some(&Fault::Kill { rank: r, step: s }) if r == rank && s == step + 1 => kill_self(),
        Some(&Fault::Panic { rank: r, step: s }) if r == rank && s == step + 1 => {
            panic!("fault injected: rank {rank} panics at step {}", step + 1)
        }
        _ => {}
    }
}

/// Whether `rank` should poison its loss gradient at step `step` (0-based).
pub fn poison_gradient(rank: usize, step: u64) -> bool {
    matches!(fault(), Some(&Fault::Nan { rank: r, step: s }) if r == rank && s == step + 1)
}

/// Called by the communication thread before its `nth` (1-based) all-reduce.
pub fn at_all_reduce(rank: usize, nth: u64) {
    if matches!(fault(), Some(&Fault::CommPanic { rank: r, nth: n }) if r == rank && n == nth) {
        panic!("fault injected: the communication thread of rank {rank} panics at all-reduce {nth}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_rejects_the_rest() {
        assert_eq!(parse("save:renamed:2"), Some(Fault::Save { stage: "renamed", nth: 2 }));
        assert_eq!(parse("kill:1:7"), Some(Fault::Kill { rank: 1, step: 7 }));
        assert_eq!(parse("panic:0:3"), Some(Fault::Panic { rank: 0, step: 3 }));
        assert_eq!(parse("comm-panic:2:5"), Some(Fault::CommPanic { rank: 2, nth: 5 }));
        assert_eq!(parse("nan:0:1"), Some(Fault::Nan { rank: 0, step: 1 }));
        for bad in ["", "save:nowhere:1", "kill:x:1", "kill:1", "explode:1:1", "kill:1:-2"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
