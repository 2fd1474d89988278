//! A bucket reduce-scattered and all-gathered by OpenMPI, for sharded optimizer state (ZeRO-1):
//! `MPI_Ireduce_scatter` leaves each rank the sums of its shard (`shard_of`), the lent
//! parameters are updated there, and `MPI_Iallgatherv` brings every rank's updated shard to all,
//! both in place in the bucket and polled as the all-reduce is (`mpi_calls::poll`). Called only
//! from the communication thread.

use std::ffi::{c_int, c_void};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use overlap_plan::shard_within;

use super::lent::{Lent, ParamValues};
use super::mpi_calls::{in_place, poll};

/// The shards' element counts and offsets as MPI takes them, kept from bucket to bucket so that a
/// step allocates nothing.
#[derive(Default)]
pub(super) struct MpiShards {
    counts: Vec<c_int>,
    offsets: Vec<c_int>,
}

impl MpiShards {
    /// Reduce-scatter and update: the sums of this rank's shard of `data` go to the lent
    /// parameters there; `data` is cleared.
    pub(super) fn reduce_scatter(
        &mut self,
        world: &SimpleCommunicator,
        data: &mut [f32],
        lent: &mut Lent,
        aborting: &AtomicBool,
    ) -> bool {
        let shard = self.shards(world, data.len());
        let ptr = data.as_mut_ptr().cast::<c_void>();
        let start = |request: *mut mpi::ffi::MPI_Request| {
            // SAFETY: `data` is an exclusively borrowed, initialised buffer of f32 values
            // (MPI_FLOAT), and `counts` (one per rank of `world`) add up to its length. MPI_IN_PLACE
            // makes MPI read the whole buffer and write this rank's sums to its start; both stay
            // borrowed and untouched until `poll` has seen the request complete (or the job is
            // aborted). `world` is alive; this is the MPI thread.
            unsafe {
                mpi::ffi::MPI_Ireduce_scatter(
                    in_place(),
                    ptr,
                    self.counts.as_ptr(),
                    mpi::ffi::RSMPI_FLOAT,
                    mpi::ffi::RSMPI_SUM,
                    world.as_raw(),
                    request,
                )
            }
        };
        if !poll(start, "MPI_Ireduce_scatter", || aborting.load(Ordering::Relaxed)) {
            return false;
        }
        data.copy_within(0..shard.len(), shard.start);
        lent.update(shard.clone(), &data[shard]);
        data.fill(0.0);
        true
    }

    /// All-gather of elements `elements` of every rank's updated shard of a bucket of `len` into
    /// the parameters' `values`, through `buffer` (at least `elements.len()` long).
    pub(super) fn all_gather(
        &mut self,
        world: &SimpleCommunicator,
        (buffer, len): (&mut [f32], usize),
        elements: Range<usize>,
        values: &mut ParamValues,
        aborting: &AtomicBool,
    ) -> bool {
        let mine = self.pieces(world, len, &elements);
        let (at, buffer) = (elements.start, &mut buffer[..elements.len()]);
        values.read_values(mine.clone(), &mut buffer[mine.start - at..mine.end - at]);
        let ptr = buffer.as_mut_ptr().cast::<c_void>();
        let start = |request: *mut mpi::ffi::MPI_Request| {
            // SAFETY: `buffer` is an exclusively borrowed buffer of `elements.len()` f32 values;
            // with MPI_IN_PLACE each rank's contribution is read from its place in it,
            // `counts[r]` values at `offsets[r]`, inside those values, and every other place is
            // written. It stays borrowed until `poll` has seen the request complete (or the job
            // is aborted). `world` is alive; this is the MPI thread.
            unsafe {
                mpi::ffi::MPI_Iallgatherv(
                    in_place(),
                    0,
                    mpi::ffi::RSMPI_DATATYPE_NULL,
                    ptr,
                    self.counts.as_ptr(),
                    self.offsets.as_ptr(),
                    mpi::ffi::RSMPI_FLOAT,
                    world.as_raw(),
                    request,
                )
            }
        };
        if !poll(start, "MPI_Iallgatherv", || aborting.load(Ordering::Relaxed)) {
            return false;
        }
        values.write_values(at..mine.start, &buffer[..mine.start - at]);
        values.write_values(mine.end..elements.end, &buffer[mine.end - at..]);
        true
    }

    /// Every rank's shard of a bucket of `len` as MPI counts and offsets; returns this rank's.
    fn shards(&mut self, world: &SimpleCommunicator, len: usize) -> Range<usize> {
        self.pieces(world, len, &(0..len))
    }

    /// Every rank's shard of a bucket of `len`, within `elements`, as MPI counts and offsets
    /// from `elements.start`; returns this rank's, as elements of the bucket.
    fn pieces(&mut self, world: &SimpleCommunicator, len: usize, elements: &Range<usize>) -> Range<usize> {
        let (rank, ranks) = (world.rank() as usize, world.size() as usize);
        assert!(
            c_int::try_from(len).is_ok(),
            "a bucket of {len} elements is more than one MPI call can count: plan smaller buckets (`bucket_cap_mb`)"
        );
        self.counts.clear();
        self.offsets.clear();
        let within = |r: usize| shard_within(len, ranks, r, elements);
        for r in 0..ranks {
            let piece = within(r);
            // Both fit: they are at most `len`, checked above.
            self.counts.push(piece.len() as c_int);
            self.offsets.push((piece.start - elements.start) as c_int);
        }
        within(rank)
    }
}
