//! Where every rank of this node has got to, so that a rank that waited too long can name the
//! ranks it waited for.
//!
//! MPI cannot say who is missing from a collective that does not complete. So each rank
//! publishes a progress count in a small file in `/dev/shm` named after the job (the launcher's
//! namespace), mapped by every rank of the node: 1 once the process starts, 2 once MPI is
//! initialised, 3 once the communicator is ready, then one more for every collective entered.
//! Every rank enters the same collectives in the same order, so a rank stuck in collective `n`
//! waits exactly for the ranks whose count is below `n`. With each rank's pid, the process's state
//! tells the rest: stopped by a signal, exited, or running (slow). Ranks on other nodes write to
//! their own node's board and show as not seen here.
//!
//! The board is opened before MPI starts, so it also covers start-up. Its name is removed as
//! soon as every rank of the node has opened it (the last to open it sees all the others there),
//! within milliseconds of the launch: the ranks keep their mappings, and nothing is left in
//! `/dev/shm` whichever way the job ends after that, a rank killed in start-up included. Where
//! the launcher does not say how many ranks share the node, rank 0 removes it once the
//! communicator is ready, and a rank that gives up waiting at start-up does. A job killed in the
//! first milliseconds leaves one of 64 bytes per rank: the next job to start on the node removes
//! such boards of this user's once every rank they recorded has exited (`remove_stale`).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Progress counts before the first collective.
pub(crate) const STARTED: u64 = 1;
pub(crate) const MPI_INITIALISED: u64 = 2;
pub(crate) const READY: u64 = 3;

/// One cache line per rank: its progress count, its pid, and whether it left (`leave`).
const SLOT_BYTES: usize = 64;

/// The node's board of this job, mapped into this process.
pub(crate) struct Board {
    /// A raw mapping: other processes write it concurrently, so no Rust reference to its bytes
    /// may exist; it is only ever reached through `slot`'s atomics.
    map: memmap2::MmapRaw,
    path: PathBuf,
    rank: usize,
    world: usize,
    /// Whether every rank of the job is on this node (so a rank never seen is not started).
    whole_job_here: bool,
}

/// One rank that has not reached the collective this rank waits in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Laggard {
    pub(crate) rank: usize,
    /// Its progress count (0: never seen on this node).
    pub(crate) reached: u64,
    /// The process's state on this node, when it was seen.
    pub(crate) state: Option<ProcessState>,
}

/// Another rank as this rank's communicator goes: how far it got, and whether its communicator
/// went too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    pub(crate) rank: usize,
    pub(crate) reached: u64,
    pub(crate) left: bool,
}

/// What `/proc` says about a rank's process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProcessState {
    Running,
    /// Stopped by a signal (SIGSTOP, SIGTSTP, a debugger).
    Stopped,
    Exited,
}

static BOARD: OnceLock<Option<Board>> = OnceLock::new();

/// This process's board, once `open` made it; `None` outside `mpirun` or where `/dev/shm` is
/// unusable (the messages then name only the waiting rank).
pub(crate) fn get() -> Option<&'static Board> {
    BOARD.get().and_then(Option::as_ref)
}

/// The ranks this one waits for, in words, from this process's board.
pub(crate) fn laggards() -> String {
    get().map_or_else(
        || "the ranks it waits for cannot be named (no progress board in /dev/shm)".into(),
        Board::describe_laggards,
    )
}

/// Opens (or joins) the job's board and marks this rank started; a no-op after the first call.
pub(crate) fn open() -> Option<&'static Board> {
    BOARD.get_or_init(|| Board::open_from_env().ok()).as_ref()
}

impl Board {
    fn open_from_env() -> std::io::Result<Board> {
        let var = |names: &[&str]| names.iter().find_map(|n| std::env::var(n).ok());
        let missing = || std::io::Error::other("not started by an MPI launcher");
        let job = var(&["PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"]).ok_or_else(missing)?;
        let number = |names: &[&str]| var(names).and_then(|v| v.parse::<usize>().ok()).ok_or_else(missing);
        let rank = number(&["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"])?;
        let world = number(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"])?;
        let local = number(&["OMPI_COMM_WORLD_LOCAL_SIZE"]).ok();
        let safe_job: String = job.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let path = PathBuf::from(format!("/dev/shm/overlap-{safe_job}"));
        remove_stale(Path::new("/dev/shm"), &path, STALE_AFTER);
        Board::open(path, rank, world, local)
    }

    /// Opens the board of `world` ranks, `local` of them (when known) on this node.
    pub(super) fn open(path: PathBuf, rank: usize, world: usize, local: Option<usize>) -> std::io::Result<Board> {
        if rank >= world {
            return Err(std::io::Error::other("rank outside the world"));
        }
        // Never truncated: the other ranks of the node may have written their slots already.
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&path)?;
        let len = (world * SLOT_BYTES) as u64;
        // Every rank sets the same length; growing zero-fills, so no rank's slot is overwritten.
        if file.metadata()?.len() < len {
            file.set_len(len)?;
        }
        // A raw mapping rather than `MmapMut`, whose slice view would be a `&[u8]` over memory the
        // other ranks write.
        let map = memmap2::MmapOptions::new().len(len as usize).map_raw(&file)?;
        let board = Board { map, path, rank, world, whole_job_here: local == Some(world) };
        board.slot(rank, 1).store(u64::from(std::process::id()), Ordering::SeqCst);
        board.reach(STARTED);
        // Sequentially consistent: of two ranks opening at once, at least one sees the other's
        // pid, so the last to arrive always sees every rank of the node.
        let opened = (0..world).filter(|&r| board.slot(r, 1).load(Ordering::SeqCst) != 0).count();
        if local.is_some_and(|local| opened >= local) {
            board.unlink();
        }
        Ok(board)
    }

    /// Word `word` (0: progress count, 1: pid) of `rank`'s slot.
    fn slot(&self, rank: usize, word: usize) -> &AtomicU64 {
        assert!(rank < self.world && word < SLOT_BYTES / 8);
        // SAFETY: the mapping is page-aligned and `world * SLOT_BYTES` long (the file is this
        // job's own and never truncated below that), so this offset is inside it and 8-byte
        // aligned; the memory lives as long as `self.map`. Every process reaches it only through
        // `AtomicU64`s made from the raw pointer, never through a reference to the bytes, so the
        // other ranks' concurrent writes are atomic accesses that Rust's aliasing rules allow.
        unsafe { &*self.map.as_mut_ptr().add(rank * SLOT_BYTES + word * 8).cast::<AtomicU64>() }
    }

    /// Publishes this rank's progress count.
    pub(crate) fn reach(&self, count: u64) {
        self.slot(self.rank, 0).store(count, Ordering::Release);
    }

    /// Counts one more collective entered; returns the new count.
    pub(crate) fn enter_collective(&self) -> u64 {
        self.slot(self.rank, 0).fetch_add(1, Ordering::AcqRel) + 1
    }

    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// This rank's progress count.
    pub(crate) fn own(&self) -> u64 {
        self.slot(self.rank, 0).load(Ordering::Acquire)
    }

    /// Marks this rank as gone from the job's collectives: its communicator was dropped, after
    /// the collectives its count says (see `parting`).
    pub(crate) fn leave(&self) {
        self.slot(self.rank, 2).store(1, Ordering::Release);
    }

    /// Every other rank, as `parting` weighs it.
    pub(crate) fn others(&self) -> Vec<Peer> {
        (0..self.world)
            .filter(|&rank| rank != self.rank)
            .map(|rank| Peer {
                rank,
                reached: self.slot(rank, 0).load(Ordering::Acquire),
                left: self.slot(rank, 2).load(Ordering::Acquire) != 0,
            })
            .collect()
    }

    /// Whether every rank of the job is on this node, so that this board sees them all.
    pub(crate) fn whole_job_here(&self) -> bool {
        self.whole_job_here
    }

    /// `rank`'s process state, when that rank has been seen on this node.
    pub(crate) fn process_state(&self, rank: usize) -> Option<ProcessState> {
        if rank >= self.world || self.slot(rank, 0).load(Ordering::Acquire) == 0 {
            return None;
        }
        Some(process_state(self.slot(rank, 1).load(Ordering::Relaxed)))
    }

    /// Removes the file; ranks that mapped it keep their mapping.
    pub(crate) fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// The ranks that have not reached this rank's current count, and if there are none, the
    /// ranks whose process is stopped or gone (a rank can stop inside a collective it entered).
    pub(crate) fn laggards(&self) -> Vec<Laggard> {
        let own = self.own();
        let everyone: Vec<Laggard> = (0..self.world)
            .filter(|&r| r != self.rank)
            .map(|rank| {
                let reached = self.slot(rank, 0).load(Ordering::Acquire);
                let pid = self.slot(rank, 1).load(Ordering::Relaxed);
                let state = (reached > 0).then(|| process_state(pid));
                Laggard { rank, reached, state }
            })
            .collect();
        let behind: Vec<Laggard> = everyone.iter().filter(|l| l.reached < own).cloned().collect();
        if !behind.is_empty() {
            return behind;
        }
        everyone.into_iter().filter(|l| matches!(l.state, Some(ProcessState::Stopped | ProcessState::Exited))).collect()
    }

    /// The laggards in words, for error messages.
    pub(crate) fn describe_laggards(&self) -> String {
        describe(&self.laggards(), self.own(), self.whole_job_here)
    }
}

/// `laggards` in words, given this rank's count `own`.
fn describe(laggards: &[Laggard], own: u64, whole_job_here: bool) -> String {
    if laggards.is_empty() {
        return "every rank on this node has reached this point and is running (a slow link or a \
                rank on another node)"
            .into();
    }
    let each: Vec<String> = laggards
        .iter()
        .map(|l| {
            let state = match l.state {
                Some(ProcessState::Stopped) => ", its process is stopped by a signal",
                Some(ProcessState::Exited) => ", its process has exited",
                Some(ProcessState::Running) | None => "",
            };
            let place = match l.reached {
                0 if whole_job_here => "has not started".to_string(),
                0 => "was not seen on this node".to_string(),
                STARTED => "has not finished initialising MPI".to_string(),
                MPI_INITIALISED => "has not finished setting up communication".to_string(),
                n if n < own => format!("is {} collective(s) behind", own - n),
                _ => "is inside the same collective".to_string(),
            };
            format!("rank {} {place}{state}", l.rank)
        })
        .collect();
    each.join("; ")
}

/// How old a board that records no rank yet must be before another job takes it for a leftover
/// (a job's ranks record themselves within moments of creating it).
const STALE_AFTER: Duration = Duration::from_secs(60);

/// Removes, from `folder`, the boards other than `own` that this user's earlier jobs left:
/// boards whose every recorded rank has exited, and boards older than `min_age` that record
/// none. A board with a rank still running (or stopped) is some job's, and stays.
fn remove_stale(folder: &Path, own: &Path, min_age: Duration) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(folder) else { return };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = entry.file_name().to_str().is_some_and(|n| n.starts_with("overlap-")) && path != own;
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if !ours || !meta.is_file() || meta.uid() != me || meta.len() % SLOT_BYTES as u64 != 0 || meta.len() > 1 << 24 {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let word = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let recorded: Vec<u64> = (0..bytes.len() / SLOT_BYTES)
            .filter(|s| word(s * SLOT_BYTES) > 0)
            .map(|s| word(s * SLOT_BYTES + 8))
            .collect();
        let running = recorded.iter().any(|&pid| process_state(pid) != ProcessState::Exited);
        let old = meta.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|age| age >= min_age);
        if !running && (!recorded.is_empty() || old) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Reads `/proc/<pid>/stat`'s state letter.
fn process_state(pid: u64) -> ProcessState {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return ProcessState::Exited };
    // The state follows the command name, which is in parentheses and may contain spaces.
    match stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()) {
        Some('T' | 't') => ProcessState::Stopped,
        Some('Z' | 'X' | 'x') | None => ProcessState::Exited,
        Some(_) => ProcessState::Running,
    }
}

#[cfg(test)]
mod tests;
