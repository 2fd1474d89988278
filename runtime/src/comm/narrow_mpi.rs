//! The MPI all-reduce with narrow (bf16 / fp16) values on the wire, for ranks on several nodes
//! (or `--all-reduce mpi`).
//!
//! Not an MPI sum over a 16-bit type, which would round every partial sum: an all-to-all of
//! narrow parts (rank r receives every rank's values of part r), an FP32 sum of each part in rank
//! order with the owner's own values unrounded, and an all-gather of the narrow sums. The bytes
//! each rank sends are those of a ring all-reduce, `2(n−1)/n` of the bucket, with one rounding
//! of each sum (see `wire`). Called only from the communication thread, polled with sleeps as
//! `mpi_calls::all_reduce_in_place` is.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use super::lent::Lent;
use super::mpi_calls::poll;
use super::wire::Narrowing;

/// Values exchanged per round: bounds the buffers (32 MiB each) and keeps MPI's `int` counts
/// far from overflowing.
const PIECE: usize = 1 << 24;

/// The narrow buffers, kept from call to call: they grow to the largest bucket once, and then
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
        let (me, ranks) = (world.rank() as usize, world.size() as usize);
        for piece in data.chunks_mut(PIECE) {
            let (len, part) = (piece.len(), piece.len().div_ceil(ranks));
            let padded = part * ranks;
            for buffer in [&mut self.sent, &mut self.received, &mut self.gathered] {
                grow(buffer, padded);
            }
            grow(&mut self.sums, part);
            let own = (me * part).min(len)..((me + 1) * part).min(len);
            // Our own part is summed from `piece`: what the all-to-all sends to ourselves is unread.
            let sent = &mut self.sent[..padded];
            narrowing.narrow(&piece[..own.start], &mut sent[..own.start]);
            narrowing.narrow(&piece[own.end..], &mut sent[own.end..len]);
            sent[len..].fill(0);
            let received = &mut self.received[..padded];
            if !exchange(world, mpi::ffi::MPI_Ialltoall, "MPI_Ialltoall", sent, part, received, aborting) {
                return false;
            }
            let received = &self.received[..padded];
            let theirs = |rank: usize| &received[rank * part..(rank + 1) * part];
            narrowing.sum_once(ranks, me, &piece[own], theirs, &mut self.sums[..part]);
            let gathered = &mut self.gathered[..padded];
            if !exchange(
                world,
                mpi::ffi::MPI_Iallgather,
                "MPI_Iallgather",
                &self.sums[..part],
                part,
                gathered,
                aborting,
            ) {
                return false;
            }
            narrowing.widen(&self.gathered[..len], piece);
        }
        lent.update_and_clear(data);
        true
    }
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
