//! The MPI calls the communication thread makes beyond the `mpi` crate's safe API: the in-place
//! non-blocking all-reduce polled with sleeps, the small collectives polled the same way (so a
//! rank that never arrives leaves this thread able to abort the job instead of blocked inside
//! MPI), the variable-size gather of trace spans, and the check of MPI return codes. Called only
//! from that thread.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use super::backoff::wait_until;

/// Gathered at rank 0: one vector per rank; `None` on the other ranks.
pub(super) type Gathered = Option<Vec<Vec<u64>>>;

/// Every rank's `data`, concatenated at rank 0 and split back by rank; `None` (and nothing
/// gathered) if `aborting` was set before every rank arrived.
pub(super) fn gather_to_root(world: &SimpleCommunicator, data: &[u64], aborting: &AtomicBool) -> Option<Gathered> {
    // The blocking gathers below cannot be given up; once every rank is here they are quick.
    if !barrier(world, || aborting.load(Ordering::Relaxed)) {
        return None;
    }
    Some(gather_arrived(world, data))
}

/// Each rank's length gathered, then its data sent to rank 0 in pieces of at most `MAX_COUNT`
/// (MPI's counts and displacements are `int`: a gather of every rank's data in one call would
/// pass them at 2^31 words in all). The communication thread makes no other point-to-point
/// calls, so the pieces from a rank arrive in order, and none else.
fn gather_arrived(world: &SimpleCommunicator, data: &[u64]) -> Gathered {
    let root = world.process_at_rank(0);
    let length = data.len() as u64;
    if world.rank() != 0 {
        root.gather_into(&length);
        data.chunks(MAX_COUNT).for_each(|piece| root.send(piece));
        return None;
    }
    let mut lengths = vec![0u64; world.size() as usize];
    root.gather_into_root(&length, &mut lengths[..]);
    let mut all = vec![data.to_vec()];
    for (rank, &length) in lengths.iter().enumerate().skip(1) {
        let mut from = vec![0u64; length as usize];
        let sender = world.process_at_rank(rank as i32);
        for piece in from.chunks_mut(MAX_COUNT) {
            sender.receive_into(piece);
        }
        all.push(from);
    }
    Some(all)
}

extern "C" {
    /// From `in_place.c`: the implementation's `MPI_IN_PLACE` sentinel.
    fn overlap_mpi_in_place() -> *mut c_void;
}

/// The implementation's `MPI_IN_PLACE`, for the calls made outside this file.
pub(super) fn in_place() -> *mut c_void {
    // SAFETY: `in_place.c` returns a constant; it reads and writes nothing.
    unsafe { overlap_mpi_in_place() }
}

/// Largest element count per call: MPI counts are `int`.
const MAX_COUNT: usize = 1 << 30;

/// Sums `data` over all ranks, in place, in chunks MPI's `int` counts can address; `false` if
/// `aborting` was set while it waited.
///
/// Non-blocking collective polled with short sleeps rather than the blocking call: OpenMPI's
/// blocking collectives busy-poll, and a communication thread spinning while it waits for a
/// slower rank takes a core from the compute threads (measured: the compute thread stalled for
/// milliseconds right after each launch on a 2-core machine running two ranks).
pub(super) fn all_reduce_in_place(world: &SimpleCommunicator, data: &mut [f32], aborting: &AtomicBool) -> bool {
    for chunk in data.chunks_mut(MAX_COUNT) {
        let (ptr, len) = (chunk.as_mut_ptr().cast::<c_void>(), chunk.len() as c_int);
        let start = |request: *mut mpi::ffi::MPI_Request| {
            // SAFETY: `chunk` is an exclusively borrowed, initialised buffer of `len` f32 values
            // (at most 2^30, so the count fits in an int) and MPI_FLOAT describes f32. MPI_IN_PLACE
            // makes MPI read and write only `chunk`, which stays borrowed and untouched until
            // `poll` has seen the request complete (or the job is aborted). `world` is alive and
            // this is the thread that initialised MPI, the only one that calls it.
            unsafe {
                mpi::ffi::MPI_Iallreduce(
                    overlap_mpi_in_place(),
                    ptr,
                    len,
                    mpi::ffi::RSMPI_FLOAT,
                    mpi::ffi::RSMPI_SUM,
                    world.as_raw(),
                    request,
                )
            }
        };
        if !poll(start, "MPI_Iallreduce", || aborting.load(Ordering::Relaxed)) {
            return false;
        }
    }
    true
}

/// Waits until every rank has arrived; `false` if `give_up` said so first.
pub(super) fn barrier(world: &SimpleCommunicator, give_up: impl Fn() -> bool) -> bool {
    // SAFETY: `request` is a valid out-pointer for the new request; `world` is alive and this is
    // the MPI thread.
    poll(|request| unsafe { mpi::ffi::MPI_Ibarrier(world.as_raw(), request) }, "MPI_Ibarrier", give_up)
}

/// Replaces `data` with rank 0's; `false` if `aborting` was set first.
pub(super) fn broadcast<T: Equivalence>(world: &SimpleCommunicator, data: &mut [T], aborting: &AtomicBool) -> bool {
    let datatype = T::equivalent_datatype();
    data.chunks_mut(MAX_COUNT).all(|chunk| {
        let (ptr, len) = (chunk.as_mut_ptr().cast::<c_void>(), chunk.len() as c_int);
        let start = |request: *mut mpi::ffi::MPI_Request| {
            // SAFETY: `chunk` is an exclusively borrowed buffer of `len` (at most 2^30) values of
            // the type `datatype` describes; it stays borrowed until `poll` has seen the request
            // complete (or the job is aborted). `world` is alive; this is the MPI thread.
            unsafe { mpi::ffi::MPI_Ibcast(ptr, len, datatype.as_raw(), 0, world.as_raw(), request) }
        };
        poll(start, "MPI_Ibcast", || aborting.load(Ordering::Relaxed))
    })
}

/// The sum of `value` over all ranks; `None` if `aborting` was set first.
pub(super) fn sum_f64(world: &SimpleCommunicator, value: f64, aborting: &AtomicBool) -> Option<f64> {
    let mut sum = 0.0f64;
    let (send, receive) = (std::ptr::from_ref(&value).cast::<c_void>(), std::ptr::from_mut(&mut sum).cast::<c_void>());
    let start = |request: *mut mpi::ffi::MPI_Request| {
        // SAFETY: one f64 is read from `value` and one written to `sum`, both alive and untouched
        // until `poll` returns; `world` is alive and this is the MPI thread.
        unsafe {
            mpi::ffi::MPI_Iallreduce(
                send,
                receive,
                1,
                mpi::ffi::RSMPI_DOUBLE,
                mpi::ffi::RSMPI_SUM,
                world.as_raw(),
                request,
            )
        }
    };
    poll(start, "MPI_Iallreduce", || aborting.load(Ordering::Relaxed)).then_some(sum)
}

/// `value` from every rank, indexed by rank; `None` if `aborting` was set first.
pub(super) fn all_gather_u64(world: &SimpleCommunicator, value: u64, aborting: &AtomicBool) -> Option<Vec<u64>> {
    let mut all = vec![0u64; world.size() as usize];
    let (send, receive) = (std::ptr::from_ref(&value).cast::<c_void>(), all.as_mut_ptr().cast::<c_void>());
    let start = |request: *mut mpi::ffi::MPI_Request| {
        // SAFETY: one u64 is read from `value` and one per rank written into `all`, which holds
        // `size` of them; both stay alive and untouched until `poll` returns. `world` is alive
        // and this is the MPI thread.
        unsafe {
            mpi::ffi::MPI_Iallgather(
                send,
                1,
                mpi::ffi::RSMPI_UINT64_T,
                receive,
                1,
                mpi::ffi::RSMPI_UINT64_T,
                world.as_raw(),
                request,
            )
        }
    };
    poll(start, "MPI_Iallgather", || aborting.load(Ordering::Relaxed)).then_some(all)
}

/// Starts a non-blocking operation and polls it until it completes (`true`) or `give_up` says
/// so (`false`; the request is then left to MPI_Abort).
pub(super) fn poll(
    start: impl FnOnce(*mut mpi::ffi::MPI_Request) -> c_int,
    call: &str,
    give_up: impl Fn() -> bool,
) -> bool {
    let mut request = std::mem::MaybeUninit::<mpi::ffi::MPI_Request>::uninit();
    check(start(request.as_mut_ptr()), call);
    // SAFETY: the call returned MPI_SUCCESS, so it initialised the request.
    let mut request = unsafe { request.assume_init() };
    let completed = || {
        let mut done: c_int = 0;
        // SAFETY: `request` is the live request created above (MPI_Test frees it and sets it to
        // MPI_REQUEST_NULL once complete, after which `wait_until` stops calling this); the
        // status is ignored through MPI's own sentinel.
        let rc = unsafe { mpi::ffi::MPI_Test(&mut request, &mut done, mpi::ffi::RSMPI_STATUS_IGNORE) };
        check(rc, "MPI_Test");
        done != 0
    };
    wait_until(POLL_SPIN, completed, give_up)
}

/// How long to poll an MPI request back to back before sleeping between polls (a small bucket
/// finishes in microseconds).
const POLL_SPIN: Duration = Duration::from_micros(20);

/// MPI's default error handler aborts the job before returning an error; if one was installed
/// that returns instead, stop here rather than train on partial sums.
pub(super) fn check(rc: c_int, call: &str) {
    assert_eq!(rc, mpi::ffi::MPI_SUCCESS as c_int, "{call} failed with code {rc}");
}
