//! The MPI all-reduce and reduce-scatter with narrow (bf16 / fp16) values on the wire, for
//! ranks on several nodes (or `--all-reduce mpi`).
//!
//! Not an MPI sum over a 16-bit type, which would round every partial sum: an all-to-all of
//! narrow parts (rank r receives every rank's values of its part), an FP32 sum of each part in
//! rank order with the owner's own values unrounded, and, for an all-reduce, an all-gather of the
//! narrow sums. Rank r's part is its shard of the bucket (`shard_of`, as sharded optimizer state
//! owns it), exchanged in rounds of at most `PIECE / ranks` values each: so a reduce-scatter is
//! the all-reduce without its all-gather, and both give each element the same sum, rounded once.
//! The bytes each rank sends are those of a ring all-reduce, `2(n−1)/n` of the bucket (half for
//! a reduce-scatter). Called only from the communication thread, polled with sleeps as
//! `mpi_calls::all_reduce_in_place` is.

use std::ffi::{c_int, c_void};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use overlap_plan::{round_piece, shard_of};

use super::lent::Lent;
use super::mpi_calls::poll;
use super::wire::Narrowing;

/// Values exchanged per round, over all ranks: bounds the buffers (32 MiB each) and keeps MPI's
/// `int` counts far from overflowing.
const PIECE: usize = 1 << 24;

/// The narrow buffers, kept from call to call: they grow to the largest round once, and then
/// a step allocates nothing.
#[derive(Default)]
pub(super) struct NarrowMpi {
    /// This rank's values, narrowed, by destination part.
    sent: Vec<u16>,
    /// Every rank's values of this rank's part, by source rank.
    received: Vec<u16>,
    /// This rank's part, summed and narrowed.
    sums: Vec<u16>,
    /// Every part's sums, in order.
    gathered: Vec<u16>,
}

/// `MPI_Ialltoall` and `MPI_Iallgather` share this signature.
type Exchange = unsafe extern "C" fn(
    *const c_void,
    c_int,
    mpi::ffi::MPI_Datatype,
    *mut c_void,
    c_int,
    mpi::ffi::MPI_Datatype,
    mpi::ffi::MPI_Comm,
    *mut mpi::ffi::MPI_Request,
) -> c_int;

impl NarrowMpi {
    /// Sums `data` over all ranks, in place, with `narrowing`'s format on the wire; then updates
    /// the parameters `lent` with it, if any, and clears `data`. `false` if `aborting` was set
    /// while it waited.
    pub(super) fn all_reduce(
        &mut self,
        world: &SimpleCommunicator,
        data: &mut [f32],
        lent: &mut Lent,
        narrowing: Narrowing,
        aborting: &AtomicBool,
    ) -> bool {
        let ranks = world.size() as usize;
        for round in 0..rounds(data.len(), ranks) {
            let Some(part) = self.sum_part(world, data, narrowing, round, aborting) else { return false };
            let (sums, gathered) = (&self.sums[..part], &mut self.gathered[..part * ranks]);
            if !exchange(world, mpi::ffi::MPI_Iallgather, "MPI_Iallgather", sums, part, gathered, aborting) {
                return false;
            }
            for r in 0..ranks {
                let theirs = piece(data.len(), ranks, r, round);
                narrowing.widen(&self.gathered[r * part..r * part + theirs.len()], &mut data[theirs]);
            }
        }
        lent.update_and_clear(data);
        true
    }

    /// Sums this rank's shard of `data` over all ranks with `narrowing`'s format on the wire,
    /// and updates the `lent` parameters there (whose state covers that shard) from the sums,
    /// rounded once as the all-reduce rounds them; clears `data`. `false` if `aborting` was set
    /// while it waited.
    pub(super) fn reduce_scatter(
        &mut self,
        world: &SimpleCommunicator,
        data: &mut [f32],
        lent: &mut Lent,
        narrowing: Narrowing,
        aborting: &AtomicBool,
    ) -> bool {
        let (me, ranks) = (world.rank() as usize, world.size() as usize);
        for round in 0..rounds(data.len(), ranks) {
            if self.sum_part(world, data, narrowing, round, aborting).is_none() {
                return false;
            }
            let mine = piece(data.len(), ranks, me, round);
            narrowing.widen(&self.sums[..mine.len()], &mut data[mine.clone()]);
            lent.update(mine.clone(), &data[mine]);
        }
        data.fill(0.0);
        true
    }

    /// Round `round`'s all-to-all of every rank's part of `data`, narrowed, and the FP32 sum of
    /// this rank's part, rounded once into `sums`; returns the round's part length (every
    /// rank's part padded to it). `None` if `aborting` was set while it waited.
    fn sum_part(
        &mut self,
        world: &SimpleCommunicator,
        data: &[f32],
        narrowing: Narrowing,
        round: usize,
        aborting: &AtomicBool,
    ) -> Option<usize> {
        let (me, ranks, len) = (world.rank() as usize, world.size() as usize, data.len());
        // The first shard is the longest, so its piece is every round's longest.
        let part = piece(len, ranks, 0, round).len();
        for buffer in [&mut self.sent, &mut self.received, &mut self.gathered] {
            grow(buffer, part * ranks);
        }
        grow(&mut self.sums, part);
        // Our own part is summed from `data`: what the all-to-all sends to ourselves is unread.
        for r in (0..ranks).filter(|&r| r != me) {
            let (theirs, to) = (piece(len, ranks, r, round), r * part);
            narrowing.narrow(&data[theirs.clone()], &mut self.sent[to..to + theirs.len()]);
            self.sent[to + theirs.len()..to + part].fill(0);
        }
        let (sent, received) = (&self.sent[..part * ranks], &mut self.received[..part * ranks]);
        if !exchange(world, mpi::ffi::MPI_Ialltoall, "MPI_Ialltoall", sent, part, received, aborting) {
            return None;
        }
        let received = &self.received[..part * ranks];
        let theirs = |rank: usize| &received[rank * part..(rank + 1) * part];
        narrowing.sum_once(ranks, me, &data[piece(len, ranks, me, round)], theirs, &mut self.sums[..part]);
        Some(part)
    }
}

/// Rounds for a bucket of `len` over `ranks`: enough for the longest shard (the first).
fn rounds(len: usize, ranks: usize) -> usize {
    rounds_of(len, ranks, part_len(ranks))
}

fn rounds_of(len: usize, ranks: usize, part_len: usize) -> usize {
    shard_of(len, ranks, 0).len().div_ceil(part_len)
}

/// The most values of one rank's part a round carries.
fn part_len(ranks: usize) -> usize {
    (PIECE / ranks).max(1)
}

/// Round `round`'s piece of `rank`'s shard of a bucket of `len` (empty past the shard's end).
fn piece(len: usize, ranks: usize, rank: usize, round: usize) -> Range<usize> {
    piece_of(len, ranks, rank, round, part_len(ranks))
}

fn piece_of(len: usize, ranks: usize, rank: usize, round: usize, part_len: usize) -> Range<usize> {
    round_piece(shard_of(len, ranks, rank), round, part_len)
}

/// Runs `call` (an all-to-all or an all-gather of `count` u16 values per rank) from `send` into
/// `receive` and polls it to completion; `false` if `aborting` was set meanwhile.
fn exchange(
    world: &SimpleCommunicator,
    call: Exchange,
    name: &str,
    send: &[u16],
    count: usize,
    receive: &mut [u16],
    aborting: &AtomicBool,
) -> bool {
    let count = c_int::try_from(count).expect("PIECE keeps counts within an int");
    let (send, receive) = (send.as_ptr().cast::<c_void>(), receive.as_mut_ptr().cast::<c_void>());
    let start = |request: *mut mpi::ffi::MPI_Request| {
        // SAFETY: `send` and `receive` are live, initialised buffers of u16, described by
        // MPI_UINT16_T, long enough for `count` values per rank (the caller sizes them: `count`
        // for an all-gather's send, `count` · ranks otherwise); they stay borrowed and untouched
        // until `poll` has seen the request complete (or the job is aborted). `world` is alive
        // and this is the thread that initialised MPI, the only one that calls it.
        unsafe {
            call(
                send,
                count,
                mpi::ffi::RSMPI_UINT16_T,
                receive,
                count,
                mpi::ffi::RSMPI_UINT16_T,
                world.as_raw(),
                request,
            )
        }
    };
    poll(start, name, || aborting.load(Ordering::Relaxed))
}

/// Makes `buffer` at least `len` long (allocating only for a larger bucket than before).
fn grow(buffer: &mut Vec<u16>, len: usize) {
    if buffer.len() < len {
        buffer.resize(len, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every round's pieces tile each rank's shard in order, the first rank's piece is the
    /// round's longest (the part every rank pads to), and a round fits the buffers.
    #[test]
    fn rounds_tile_every_shard_and_the_first_piece_is_the_longest() {
        for (len, ranks, part_len) in [(0, 2, 4), (1, 3, 4), (10, 3, 2), (1000, 7, 33), (17, 4, 100)] {
            let rounds = rounds_of(len, ranks, part_len);
            for rank in 0..ranks {
                let mut next = shard_of(len, ranks, rank).start;
                for round in 0..rounds {
                    let p = piece_of(len, ranks, rank, round, part_len);
                    assert_eq!(p.start, next, "len {len}, {ranks} ranks, rank {rank}, round {round}");
                    assert!(p.len() <= piece_of(len, ranks, 0, round, part_len).len() && p.len() <= part_len);
                    next = p.end;
                }
                assert_eq!(next, shard_of(len, ranks, rank).end, "len {len}, {ranks} ranks, rank {rank}");
            }
        }
        assert!(part_len(3) * 3 <= PIECE && part_len(1 << 30) == 1);
    }
}
