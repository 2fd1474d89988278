//! The node's shared segments that the all-reduces, reduce-scatters and all-gathers go through,
//! for ranks that share one node: each rank's flags, doorbell and chunk slots (the collectives
//! themselves: `shared_all_reduce`, `narrow_shared`, `shared_shards`; what a chunk belongs to:
//! `chunk_shape`).
//!
//! Why: measured on a 2-core machine, OpenMPI's all-reduce of the mlp's 38 MiB of gradients
//! between two ranks of one node costs 17 ms (blocking) to 28 ms (non-blocking, polled) of CPU
//! time, which the compute threads then lack. Here every rank maps every rank's segment of an MPI
//! shared-memory window, and a bucket goes through in chunks that stay in cache: each rank copies
//! its chunk in, sums one part of the chunk over all ranks, and copies the other parts' sums out.
//! Each gradient is read and written once from main memory; the rest is cache traffic.
//!
//! Every element is summed by exactly one rank, in rank order whichever rank it is, and copied to
//! the others: all ranks end with bit-identical gradients, the very floats a reduce-scatter of
//! the same bucket gives (`shared_shards`). When parameters are
//! lent with the bucket (`lent`), nothing is copied out: each rank updates its parameters from
//! the sums in the slots, its own part's and then the others', and clears the bucket as it reads
//! it, for the next step.
//!
//! A rank waiting for another sleeps on that rank's doorbell (`doorbell`), which wakes it once,
//! when the other publishes; sleeping on a timer woke it several times per wait, and each wake
//! took the core from a compute thread.

use std::ffi::c_void;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use super::doorbell::Doorbell;

/// Elements per chunk: 1 MiB of f32, so that a chunk of every rank fits in the shared cache.
pub(super) const CHUNK: usize = 1 << 18;
/// Chunk slots per rank: a rank can copy in chunk `s + 1` while the others still read chunk `s`.
pub(super) const SLOTS: usize = 2;
/// The flags, the doorbell's two words and the slots' shapes live in the first page of a
/// segment, one per cache line; the slots follow.
const HEADER_BYTES: usize = 4096;
const SEGMENT_BYTES: usize = HEADER_BYTES + SLOTS * CHUNK * std::mem::size_of::<f32>();
/// MPI need not align segments (OpenMPI's packed layout does not): each rank allocates this much
/// more and every process starts the segment at the next cache line, the same place in memory
/// for all of them (mappings are page-aligned, so the offset from a line is the same everywhere).
const ALIGN: usize = 64;
/// Parts of a chunk start on cache-line boundaries so that no two ranks write one line.
pub(super) const PART_ALIGN: usize = 64 / std::mem::size_of::<f32>();

/// Elements of a lent bucket read, then cleared, at a time: 16 KiB, well inside L1.
const BLOCK: usize = 1 << 12;

/// How long to check the other ranks' flags back to back before sleeping on their doorbells:
/// within a bucket they are working through the same chunk, microseconds away.
const SPIN: Duration = Duration::from_micros(50);

/// How often a rank asleep on a doorbell wakes to check whether it is aborting.
const ABORT_CHECK: Duration = Duration::from_millis(10);

/// Progress of one rank through the chunk sequence, published to the others.
#[derive(Clone, Copy)]
pub(super) enum Flag {
    /// This rank's copy of chunk `s` is in its slot.
    Posted = 0,
    /// This rank's part of chunk `s` is summed, in its slot.
    Reduced = 1,
    /// This rank has read everything it needs of chunk `s` from the other ranks' slots.
    Consumed = 2,
}

/// One rank's segment, as mapped into this process.
#[derive(Clone, Copy)]
pub(super) struct Segment(*mut u8);

impl Segment {
    fn flag(self, flag: Flag) -> *mut u64 {
        // SAFETY: a segment is SEGMENT_BYTES long from its aligned start, so the header's cache
        // lines are inside it.
        unsafe { self.0.add(flag as usize * 64).cast() }
    }

    /// The doorbell's ring count (`word` 0) and sleepers (1), on the two cache lines after the
    /// three flags'.
    fn doorbell_word(self, word: usize) -> *mut u32 {
        debug_assert!(word < 2);
        // SAFETY: as for `flag`: lines 3 and 4 of the header page.
        unsafe { self.0.add((3 + word) * 64).cast() }
    }

    /// The shape of the chunk in slot `slot` (see `chunk_shape`), on the cache lines after the
    /// doorbell's.
    fn shape_word(self, slot: usize) -> *mut u64 {
        debug_assert!(slot < SLOTS);
        // SAFETY: as for `flag`: lines 5 and 6 of the header page.
        unsafe { self.0.add((5 + slot) * 64).cast() }
    }

    /// Elements `range` of chunk slot `slot`.
    pub(super) fn slot(self, slot: usize, range: Range<usize>) -> *mut f32 {
        debug_assert!(slot < SLOTS && range.end <= CHUNK);
        // SAFETY: the offset stays inside the segment (checked above in debug builds; callers
        // pass slots below SLOTS and ranges within a chunk).
        unsafe { self.0.add(HEADER_BYTES).cast::<f32>().add(slot * CHUNK + range.start) }
    }
}

/// The node's shared window and this rank's place in the chunk sequence. Lives on the MPI thread.
pub(super) struct SharedMemory {
    window: mpi::ffi::MPI_Win,
    pub(super) rank: usize,
    /// Every rank's segment, own included, indexed by rank.
    pub(super) segments: Vec<Segment>,
    /// Chunks all-reduced so far; the flags hold sequence numbers.
    pub(super) sequence: u64,
}

/// Why shared memory cannot carry this job's all-reduces.
pub(super) enum Unavailable {
    OneRank,
    SeveralNodes { node_ranks: usize, world: usize },
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::OneRank => write!(f, "there is only one rank"),
            Unavailable::SeveralNodes { node_ranks, world } => {
                write!(f, "only {node_ranks} of the {world} ranks share this node")
            }
        }
    }
}

impl SharedMemory {
    /// Maps a shared window when every rank of `world` is on this node. Collective: every rank
    /// calls it and all get the same answer.
    pub(super) fn create(world: &SimpleCommunicator) -> Result<Self, Unavailable> {
        let (rank, ranks) = (world.rank() as usize, world.size() as usize);
        if ranks < 2 {
            return Err(Unavailable::OneRank);
        }
        // Keyed by world rank, so node ranks equal world ranks when the whole job is here.
        let node = world.split_shared(world.rank());
        if node.size() as usize != ranks {
            return Err(Unavailable::SeveralNodes { node_ranks: node.size() as usize, world: ranks });
        }
        let mut window = std::mem::MaybeUninit::<mpi::ffi::MPI_Win>::uninit();
        let mut base: *mut c_void = std::ptr::null_mut();
        // SAFETY: `base` and `window` are valid out-pointers; the size fits MPI_Aint; `node` is a
        // live communicator and this is the thread that initialised MPI, the only one calling it.
        let rc = unsafe {
            mpi::ffi::MPI_Win_allocate_shared(
                (SEGMENT_BYTES + ALIGN) as mpi::ffi::MPI_Aint,
                1,
                mpi::ffi::RSMPI_INFO_NULL,
                node.as_raw(),
                (&mut base as *mut *mut c_void).cast(),
                window.as_mut_ptr(),
            )
        };
        super::mpi_calls::check(rc, "MPI_Win_allocate_shared");
        // SAFETY: the call succeeded, so it initialised the window handle.
        let window = unsafe { window.assume_init() };
        let mut shared = SharedMemory { window, rank, segments: Vec::with_capacity(ranks), sequence: 0 };
        for peer in 0..ranks {
            let (mut size, mut unit, mut at): (mpi::ffi::MPI_Aint, i32, *mut c_void) = (0, 0, std::ptr::null_mut());
            // SAFETY: out-pointers are valid; `peer` is a rank of the window's group.
            let rc = unsafe {
                mpi::ffi::MPI_Win_shared_query(
                    window,
                    peer as i32,
                    &mut size,
                    &mut unit,
                    (&mut at as *mut *mut c_void).cast(),
                )
            };
            super::mpi_calls::check(rc, "MPI_Win_shared_query");
            assert!(size as usize >= SEGMENT_BYTES + ALIGN, "rank {peer}'s shared segment has only {size} bytes");
            let at = at.cast::<u8>();
            shared.segments.push(Segment(at.wrapping_add(at.align_offset(ALIGN))));
        }
        for flag in [Flag::Posted, Flag::Reduced, Flag::Consumed] {
            shared.flag(rank, flag).store(0, Ordering::Relaxed);
        }
        for slot in 0..SLOTS {
            shared.shape_word(rank, slot).store(0, Ordering::Relaxed);
        }
        let bell = shared.doorbell(rank);
        bell.rings.store(0, Ordering::Relaxed);
        bell.sleepers.store(0, Ordering::Relaxed);
        // Nobody reads a flag before everyone has zeroed theirs.
        world.barrier();
        Ok(shared)
    }

    /// The next chunk's sequence number and the slot it goes through.
    pub(super) fn next_chunk(&mut self) -> (u64, usize) {
        self.sequence += 1;
        (self.sequence, (self.sequence % SLOTS as u64) as usize)
    }

    /// `rank`'s `flag`, which other processes change only through atomic operations.
    fn flag(&self, rank: usize, flag: Flag) -> &AtomicU64 {
        // SAFETY: segments start on a cache line (see ALIGN), so the flag is aligned; the
        // window stays mapped while `self` lives, which bounds the reference.
        unsafe { AtomicU64::from_ptr(self.segments[rank].flag(flag)) }
    }

    /// The shape `rank` published for the chunk in slot `slot`.
    pub(super) fn shape_word(&self, rank: usize, slot: usize) -> &AtomicU64 {
        // SAFETY: as for `flag`.
        unsafe { AtomicU64::from_ptr(self.segments[rank].shape_word(slot)) }
    }

    /// `rank`'s doorbell, rung whenever it publishes a flag.
    fn doorbell(&self, rank: usize) -> Doorbell<'_> {
        let segment = self.segments[rank];
        // SAFETY: as for `flag`: the words start cache lines, so they are aligned, and the window
        // stays mapped while `self` lives; other processes change them only atomically.
        unsafe {
            Doorbell {
                rings: AtomicU32::from_ptr(segment.doorbell_word(0)),
                sleepers: AtomicU32::from_ptr(segment.doorbell_word(1)),
            }
        }
    }

    pub(super) fn publish(&self, flag: Flag, sequence: u64) {
        self.flag(self.rank, flag).store(sequence, Ordering::Release);
        self.doorbell(self.rank).ring();
    }

    /// Waits until every rank's `flag` has reached `sequence`: checks back to back for `SPIN`,
    /// then sleeps on the doorbell of a rank not there yet until it rings (or `ABORT_CHECK`
    /// passes). `false` if `aborting` was set meanwhile.
    pub(super) fn wait_all(&self, flag: Flag, sequence: u64, aborting: &AtomicBool) -> bool {
        let started = Instant::now();
        for rank in 0..self.segments.len() {
            let bell = self.doorbell(rank);
            loop {
                // Read before the flag: a ring after this read makes the sleep below return.
                let seen = bell.count();
                if self.flag(rank, flag).load(Ordering::Acquire) >= sequence {
                    break;
                }
                if aborting.load(Ordering::Relaxed) {
                    return false;
                }
                if started.elapsed() < SPIN {
                    std::hint::spin_loop();
                } else {
                    bell.sleep(seen, ABORT_CHECK);
                }
            }
        }
        true
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // Freeing a window is collective: while unwinding from a panic the other ranks are not
        // here to meet this one, and the process is ending anyway.
        if !std::thread::panicking() {
            // SAFETY: the window is live and freed once; no slice into it outlives `all_reduce`.
            let rc = unsafe { mpi::ffi::MPI_Win_free(&mut self.window) };
            super::mpi_calls::check(rc, "MPI_Win_free");
        }
    }
}

/// `out = v(0) + v(1) + ... + v(ranks - 1)`, added in rank order whichever rank sums: every
/// rank's sums are the same floats, and a reduce-scatter's (`shared_shards`) read the same sums.
pub(super) fn sum_in_rank_order<'a>(ranks: usize, value: impl Fn(usize) -> &'a [f32], out: &mut [f32]) {
    out.copy_from_slice(value(0));
    for r in 1..ranks {
        out.iter_mut().zip(value(r)).for_each(|(o, v)| *o += *v);
    }
}

/// `range` in pieces of `BLOCK` elements, the last one shorter.
pub(super) fn blocks(range: Range<usize>) -> impl Iterator<Item = Range<usize>> {
    range.clone().step_by(BLOCK).map(move |start| start..(start + BLOCK).min(range.end))
}

/// The elements of a chunk of `len` that `rank` of `ranks` sums: contiguous, cache-line aligned
/// parts that together cover the chunk.
pub(super) fn part(len: usize, ranks: usize, rank: usize) -> Range<usize> {
    let lines = len.div_ceil(PART_ALIGN);
    let at = |r: usize| (lines * r / ranks * PART_ALIGN).min(len);
    at(rank)..at(rank + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_a_chunk_in_aligned_disjoint_pieces() {
        for len in [0, 1, 15, 16, 17, 1000, CHUNK - 3, CHUNK] {
            for ranks in 1..=9 {
                let mut next = 0;
                for rank in 0..ranks {
                    let p = part(len, ranks, rank);
                    assert_eq!(p.start, next, "len {len}, {ranks} ranks, rank {rank}");
                    assert!(p.start.is_multiple_of(PART_ALIGN) || p.start == len);
                    next = p.end;
                }
                assert_eq!(next, len);
            }
        }
    }
}
