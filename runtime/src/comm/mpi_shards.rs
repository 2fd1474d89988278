//! A bucket reduce-scattered and all-gathered by OpenMPI, for sharded optimizer state (ZeRO-1):
//! `MPI_Ireduce_scatter` leaves each rank the sums of its shard (`shard_of`), the lent
//! parameters are updated there, and `MPI_Iallgatherv` brings every rank's updated shard to all,
//! both in place in the bucket and polled as the all-reduce is (`mpi_calls::poll`). Called only
//! from the communication thread.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use overlap_plan::shard_of;

use super::lent::Lent;
use super::mpi_calls::{in_place, poll};

/// The shards' element counts and offsets as MPI takes them, kept from bucket to bucket so that a
/// step allocates nothing.
#[derive(Default)]
pub(super) struct MpiShards {
    counts: Vec<c_int>,
    offsets: Vec<c_int>,
}

impl MpiShards {
    /// Sums this rank's shard of `data` over all ranks, updates the `lent` parameters there, and
    /// gives every rank's parameters the others' updated shards; clears `data`. `false` if
    /// `aborting` was set while it waited for another rank.
    pub(super) fn reduce_scatter_and_gather(
        &mut self,
        world: &SimpleCommunicator,
        data: &mut [f32],
        lent: &mut Lent,
        aborting: &AtomicBool,
    ) -> bool {
        let (rank, ranks, len) = (world.rank() as usize, world.size() as usize, data.len());
        assert!(
            c_int::try_from(len).is_ok(),
            "a bucket of {len} elements is more than one MPI call can count: plan smaller buckets (`bucket_cap_mb`)"
        );
        self.counts.clear();
        self.offsets.clear();
        for r in 0..ranks {
            let shard = shard_of(len, ranks, r);
            // Both fit: they are at most `len`, checked above.
            self.counts.push(shard.len() as c_int);
            self.offsets.push(shard.start as c_int);
        }
        let give_up = || aborting.load(Ordering::Relaxed);
        let ptr = data.as_mut_ptr().cast::<c_void>();
        let start = |request: *mut mpi::ffi::MPI_Request| {
            // SAFETY: `data` is an exclusively borrowed, initialised buffer of `len` f32 values
            // (MPI_FLOAT), and `counts` (one per rank of `world`) add up to `len`. MPI_IN_PLACE
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
        if !poll(start, "MPI_Ireduce_scatter", give_up) {
            return false;
        }
        let shard = shard_of(len, ranks, rank);
        data.copy_within(0..shard.len(), shard.start);
        lent.update(shard.clone(), &data[shard.clone()]);
        lent.read_values(shard.clone(), &mut data[shard.clone()]);
        let ptr = data.as_mut_ptr().cast::<c_void>();
        let start = |request: *mut mpi::ffi::MPI_Request| {
            // SAFETY: as above; with MPI_IN_PLACE each rank's contribution is read from its
            // place in the buffer, `counts[r]` values at `offsets[r]`, inside the `len` values.
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
        if !poll(start, "MPI_Iallgatherv", give_up) {
            return false;
        }
        lent.write_values(0..shard.start, &data[..shard.start]);
        lent.write_values(shard.end..len, &data[shard.end..]);
        data.fill(0.0);
        true
    }
}
