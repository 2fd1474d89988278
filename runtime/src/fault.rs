//! Fault injection for the reliability tests: `OVERLAP_FAULT` makes a run die at a chosen
//! point, so tests can check what survives. Only with the `fault-injection` feature, which
//! only this repository's fault harness enables (`tests/faults`: the `mlp` example as a binary
//! of its own, `fault-mlp`), and only in a process whose `main` calls [`enable`]: Cargo compiles
//! a feature into every workspace member built in the same command (`cargo build --workspace`
//! gives the examples this one too), so the feature alone does not decide; the examples users
//! build never honour the variable. Without the feature every check is a constant `false`; with
//! it, one load of a flag, then of a value parsed once.
//!
//! - `save:<stage>:<n>`: SIGKILL this process at `<stage>` of its `n`-th checkpoint save
//!   (stages: see `SaveStage`).
//! - `kill:<rank>:<step>` / `panic:<rank>:<step>`: rank `rank` is SIGKILLed / panics when step
//!   `step` (1-based) begins.
//! - `term:<rank>:<step>`: rank `rank` sends itself SIGTERM when step `step` begins, as a
//!   scheduler would, at a step chosen exactly; `term:<rank>:<step>:<micro>` when micro-step
//!   `micro` (1-based) of that step begins.
//! - `comm-panic:<rank>:<n>`: rank `rank`'s communication thread panics at its `n`-th all-reduce.
//! - `nan:<rank>:<step>`: rank `rank` puts a NaN into its loss gradient at step `step`.
//! - `huge:<rank>:<step>`: rank `rank` puts 1e30 into its loss gradient at step `step`: finite in
//!   f32, past fp16's range on the wire.
//! - `slow-save:<ms>:<n>`: the `n`-th checkpoint save takes `ms` milliseconds longer.
//! - `full-disk:save:<n>`: the `n`-th checkpoint save fails as a full disk would (ENOSPC), once
//!   its model file is written: an error, where `save:` kills the process.
//! - `save-params:synced:<n>`: SIGKILL this process during its `n`-th parameters file write,
//!   once the temporary file is written and synced, before it is renamed into place.
//! - `stop:<rank>:<point>`: rank `rank` stops itself with SIGSTOP at a start-up point
//!   (`mpi-init`: before MPI's initialisation; `shared-memory`: before the shared-memory set-up;
//!   `handshake`: before the schedule check), during its first checkpoint write (`saving`, once
//!   the model file is written) or, given a number, when that step (1-based) begins.
//! - `late-trace:<rank>:<ms>`: rank `rank` reads its clock for the trace's time zero `ms`
//!   milliseconds after the others, as a rank the scheduler wakes late from the barrier.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    SlowSave { millis: u64, nth: u64 },
    FullDisk { nth: u64 },
    SaveParams { nth: u64 },
    Kill { rank: usize, step: u64 },
    Panic { rank: usize, step: u64 },
    Term { rank: usize, step: u64, micro: u64 },
    CommPanic { rank: usize, nth: u64 },
    Nan { rank: usize, step: u64 },
    Huge { rank: usize, step: u64 },
    Stop { rank: usize, at: StopPoint },
    LateTrace { rank: usize, millis: u64 },
}

#[derive(Debug, PartialEq, Eq)]
enum StopPoint {
    StartUp(&'static str),
    Step(u64),
    /// During its first checkpoint write, once the model file is written.
    Saving,
}

/// The start-up points `stop:<rank>:<point>` can name.
const START_UP_POINTS: [&str; 3] = ["mpi-init", "shared-memory", "handshake"];

/// Set by [`enable`].
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Makes this process honour `OVERLAP_FAULT` (with the `fault-injection` feature; nothing
/// without it). The fault harness's binary calls it first thing in `main`, before any thread
/// starts.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

fn fault() -> Option<&'static Fault> {
    if !cfg!(feature = "fault-injection") || !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
    FAULT.get_or_init(|| std::env::var("OVERLAP_FAULT").ok().and_then(|spec| parse(&spec))).as_ref()
}

fn parse(spec: &str) -> Option<Fault> {
    let mut parts = spec.split(':');
    let (kind, a, last) = (parts.next()?, parts.next()?, parts.next()?);
    let rank = || a.parse::<usize>().ok();
    if kind == "stop" {
        let at = match START_UP_POINTS.iter().find(|&&p| p == last) {
            Some(point) => StopPoint::StartUp(point),
            None if last == "saving" => StopPoint::Saving,
            None => StopPoint::Step(last.parse().ok()?),
        };
        return Some(Fault::Stop { rank: rank()?, at });
    }
    let b = last.parse::<u64>().ok()?;
    if kind == "term" {
        let micro = parts.next().map_or(Some(1), |m| m.parse().ok())?;
        return Some(Fault::Term { rank: rank()?, step: b, micro });
    }
    Some(match kind {
        "slow-save" => Fault::SlowSave { millis: a.parse().ok()?, nth: b },
        "save-params" if a == "synced" => Fault::SaveParams { nth: b },
        "full-disk" if a == "save" => Fault::FullDisk { nth: b },
        "save" => Fault::Save { stage: SaveStage::ALL.iter().find(|s| s.name() == a)?.name(), nth: b },
        "kill" => Fault::Kill { rank: rank()?, step: b },
        "panic" => Fault::Panic { rank: rank()?, step: b },
        "comm-panic" => Fault::CommPanic { rank: rank()?, nth: b },
        "nan" => Fault::Nan { rank: rank()?, step: b },
        "huge" => Fault::Huge { rank: rank()?, step: b },
        "late-trace" => Fault::LateTrace { rank: rank()?, millis: b },
        _ => return None,
    })
}

fn kill_self() -> ! {
    // SAFETY: raise() has no memory-safety preconditions; SIGKILL cannot be caught, so the
    // process ends here exactly as `kill -9` would end it.
    unsafe { libc::raise(libc::SIGKILL) };
    std::process::abort()
}

fn stop_self() {
    // SAFETY: raise() has no memory-safety preconditions; the process resumes on SIGCONT.
    unsafe { libc::raise(libc::SIGSTOP) };
}

/// The rank the launcher gave this process, before MPI can say it.
fn launcher_rank() -> Option<usize> {
    ["OMPI_COMM_WORLD_RANK", "PMIX_RANK"].iter().find_map(|v| std::env::var(v).ok()?.parse().ok())
}

/// Called at start-up point `point` (one of `START_UP_POINTS`).
pub fn at_start_up(point: &str) {
    if let Some(Fault::Stop { rank, at: StopPoint::StartUp(p) }) = fault() {
        if *p == point && launcher_rank() == Some(*rank) {
            stop_self();
        }
    }
}

/// Counts this process's checkpoint saves: returns the number (1-based) of the one starting.
pub fn next_save() -> u64 {
    static SAVES: AtomicU64 = AtomicU64::new(0);
    SAVES.fetch_add(1, Ordering::Relaxed) + 1
}

/// Called at each stage of the `nth` (1-based) checkpoint save.
pub fn at_save_stage(stage: SaveStage, nth: u64) {
    match fault() {
        Some(f) if *f == (Fault::Save { stage: stage.name(), nth }) => kill_self(),
        Some(&Fault::SlowSave { millis, nth: n }) if n == nth && stage == SaveStage::ModelWritten => {
            std::thread::sleep(std::time::Duration::from_millis(millis))
        }
        Some(Fault::Stop { rank, at: StopPoint::Saving })
            if nth == 1 && stage == SaveStage::ModelWritten && launcher_rank() == Some(*rank) =>
        {
            stop_self()
        }
        _ => {}
    }
}

/// The error a full disk gives, at stage `stage` of the `nth` checkpoint save, when asked for.
pub fn save_error(stage: SaveStage, nth: u64) -> Option<std::io::Error> {
    (stage == SaveStage::ModelWritten && fault() == Some(&Fault::FullDisk { nth }))
        .then(|| std::io::Error::from_raw_os_error(libc::ENOSPC))
}

/// Called when a parameters file write has synced its temporary file, before the rename.
pub fn at_params_synced() {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let nth = WRITES.fetch_add(1, Ordering::Relaxed) + 1;
    if fault() == Some(&Fault::SaveParams { nth }) {
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
        Some(&Fault::Stop { rank: r, at: StopPoint::Step(s) }) if r == rank && s == step + 1 => stop_self(),
        _ => {}
    }
}

/// Called when micro-step `micro` (0-based) of step `step` (0-based) begins on `rank`; the
/// first one right after `at_step`.
pub fn at_micro_step(rank: usize, step: u64, micro: usize) {
    if let Some(&Fault::Term { rank: r, step: s, micro: m }) = fault() {
        if r == rank && s == step + 1 && m == micro as u64 + 1 {
            // SAFETY: raise() has no memory-safety preconditions; the run's handler records it.
            unsafe { libc::raise(libc::SIGTERM) };
        }
    }
}

/// The value `rank` should put into its loss gradient at step `step` (0-based), if any: NaN, or
/// one past fp16's range.
pub fn poisoned_gradient(rank: usize, step: u64) -> Option<f32> {
    match fault() {
        Some(&Fault::Nan { rank: r, step: s }) if r == rank && s == step + 1 => Some(f32::NAN),
        Some(&Fault::Huge { rank: r, step: s }) if r == rank && s == step + 1 => Some(1e30),
        _ => None,
    }
}

/// Called on `rank` as it leaves the barrier before the trace's time zero.
pub fn at_trace_start(rank: usize) {
    if let Some(&Fault::LateTrace { rank: r, millis }) = fault() {
        if r == rank {
            std::thread::sleep(std::time::Duration::from_millis(millis));
        }
    }
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
        assert_eq!(parse("term:0:3"), Some(Fault::Term { rank: 0, step: 3, micro: 1 }));
        assert_eq!(parse("term:1:3:2"), Some(Fault::Term { rank: 1, step: 3, micro: 2 }));
        assert_eq!(parse("comm-panic:2:5"), Some(Fault::CommPanic { rank: 2, nth: 5 }));
        assert_eq!(parse("nan:0:1"), Some(Fault::Nan { rank: 0, step: 1 }));
        assert_eq!(parse("huge:2:3"), Some(Fault::Huge { rank: 2, step: 3 }));
        assert_eq!(parse("stop:1:mpi-init"), Some(Fault::Stop { rank: 1, at: StopPoint::StartUp("mpi-init") }));
        assert_eq!(parse("slow-save:2500:1"), Some(Fault::SlowSave { millis: 2500, nth: 1 }));
        assert_eq!(parse("stop:2:4"), Some(Fault::Stop { rank: 2, at: StopPoint::Step(4) }));
        assert_eq!(parse("stop:0:saving"), Some(Fault::Stop { rank: 0, at: StopPoint::Saving }));
        assert_eq!(parse("save-params:synced:1"), Some(Fault::SaveParams { nth: 1 }));
        assert_eq!(parse("full-disk:save:2"), Some(Fault::FullDisk { nth: 2 }));
        assert_eq!(parse("late-trace:1:30"), Some(Fault::LateTrace { rank: 1, millis: 30 }));
        for bad in [
            "",
            "save:nowhere:1",
            "save-params:renamed:1",
            "kill:x:1",
            "kill:1",
            "explode:1:1",
            "kill:1:-2",
            "stop:1:later",
            "stop:x:1",
            "term:0:3:x",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
