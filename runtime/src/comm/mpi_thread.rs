//! OpenMPI driven from one dedicated thread.
//!
//! Measured on this project's machines: OpenMPI's non-blocking collectives do not progress in
//! the background (an `MPI_Iallreduce` of 64 MiB left alone for 1 s still needed the full ~40 ms
//! in `wait`), while a thread sitting in the blocking `MPI_Allreduce` overlaps fully with compute.
//! So this thread initialises MPI, makes every MPI call, and finalises it; the compute thread
//! only sends it requests. MPI objects never leave the thread, so nothing needs to be `Send`.

use std::ffi::{c_int, c_void};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use mpi::collective::SystemOperation;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Threading;

use super::bucket::GradBucket;
use crate::error::{Error, Result};

enum Request {
    AllReduce(GradBucket, Sender<GradBucket>),
    Broadcast(Vec<f32>, Sender<Vec<f32>>),
    SumF64(f64, Sender<f64>),
    AllGatherU64(u64, Sender<Vec<u64>>),
    Barrier(Sender<()>),
}

pub(super) struct MpiThread {
    requests: Option<Sender<Request>>,
    thread: Option<JoinHandle<()>>,
    rank: usize,
    world_size: usize,
}

impl MpiThread {
    pub(super) fn start() -> Result<Self> {
        let (requests, inbox) = channel();
        let (ready_tx, ready) = channel();
        let thread = std::thread::Builder::new()
            .name("overlap-mpi".into())
            .spawn(move || serve(inbox, ready_tx))
            .map_err(|e| Error::MpiInit(format!("cannot start the communication thread: {e}")))?;
        let (rank, world_size) =
            ready.recv().map_err(|_| Error::CommThreadDied("initialising MPI"))?.map_err(Error::MpiInit)?;
        Ok(MpiThread { requests: Some(requests), thread: Some(thread), rank, world_size })
    }

    pub(super) fn rank(&self) -> usize {
        self.rank
    }

    pub(super) fn world_size(&self) -> usize {
        self.world_size
    }

    /// Queues an in-place sum; the bucket comes back on `reply` when it is done. Requests are
    /// served in order, so every rank runs the collectives in the order its schedule launches them.
    pub(super) fn all_reduce(&self, bucket: GradBucket, reply: Sender<GradBucket>) {
        // A send error means the thread is gone; dropping `reply` makes the wait report it.
        let _ = self.send(Request::AllReduce(bucket, reply));
    }

    pub(super) fn broadcast(&self, data: Vec<f32>) -> Result<Vec<f32>> {
        self.call(|reply| Request::Broadcast(data, reply), "broadcasting parameters")
    }

    pub(super) fn sum_f64(&self, value: f64) -> Result<f64> {
        self.call(|reply| Request::SumF64(value, reply), "summing a metric")
    }

    pub(super) fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        self.call(|reply| Request::AllGatherU64(value, reply), "exchanging schedule fingerprints")
    }

    pub(super) fn barrier(&self) -> Result<()> {
        self.call(Request::Barrier, "waiting at a barrier")
    }

    fn send(&self, request: Request) -> Result<()> {
        let requests = self.requests.as_ref().expect("requests is only taken in drop");
        requests.send(request).map_err(|_| Error::CommThreadDied("queueing a request"))
    }

    fn call<T>(&self, make: impl FnOnce(Sender<T>) -> Request, what: &'static str) -> Result<T> {
        let (reply, answer) = channel();
        self.send(make(reply))?;
        answer.recv().map_err(|_| Error::CommThreadDied(what))
    }
}

impl Drop for MpiThread {
    /// Closing the request channel ends the thread's loop; it then finalises MPI.
    fn drop(&mut self) {
        drop(self.requests.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(inbox: Receiver<Request>, ready: Sender<std::result::Result<(usize, usize), String>>) {
    // Only this thread ever calls MPI, and it is the thread that initialises it: FUNNELED is
    // exactly the guarantee needed.
    let Some((universe, _level)) = mpi::initialize_with_threading(Threading::Funneled) else {
        let _ = ready.send(Err("MPI was already initialised in this process".into()));
        return;
    };
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    if ready.send(Ok((rank, size))).is_err() {
        return;
    }
    // Replies may find their receiver gone (a handle dropped unwaited); that is not an error.
    for request in inbox {
        match request {
            Request::AllReduce(mut bucket, reply) => {
                all_reduce_in_place(&world, bucket.as_mut_slice());
                let _ = reply.send(bucket);
            }
            Request::Broadcast(mut data, reply) => {
                world.process_at_rank(0).broadcast_into(&mut data[..]);
                let _ = reply.send(data);
            }
            Request::SumF64(value, reply) => {
                let mut sum = 0.0f64;
                world.all_reduce_into(&value, &mut sum, SystemOperation::sum());
                let _ = reply.send(sum);
            }
            Request::AllGatherU64(value, reply) => {
                let mut all = vec![0u64; size];
                world.all_gather_into(&value, &mut all[..]);
                let _ = reply.send(all);
            }
            Request::Barrier(reply) => {
                world.barrier();
                let _ = reply.send(());
            }
        }
    }
}

extern "C" {
    /// From `in_place.c`: the implementation's `MPI_IN_PLACE` sentinel.
    fn overlap_mpi_in_place() -> *mut c_void;
}

/// Largest element count per call: MPI counts are `int`.
const MAX_COUNT: usize = 1 << 30;

/// Sums `data` over all ranks, in place, in chunks MPI's `int` counts can address.
fn all_reduce_in_place(world: &SimpleCommunicator, data: &mut [f32]) {
    for chunk in data.chunks_mut(MAX_COUNT) {
        // SAFETY: `chunk` is an exclusively borrowed, initialised buffer of `chunk.len()` f32
        // values (at most 2^30, so the count fits in an int) and MPI_FLOAT describes f32.
        // MPI_IN_PLACE makes MPI read and write only `chunk`. `world` is alive for the call and
        // this is the thread that initialised MPI, the only one that calls it.
        let rc = unsafe {
            mpi::ffi::MPI_Allreduce(
                overlap_mpi_in_place(),
                chunk.as_mut_ptr().cast::<c_void>(),
                chunk.len() as c_int,
                mpi::ffi::RSMPI_FLOAT,
                mpi::ffi::RSMPI_SUM,
                world.as_raw(),
            )
        };
        // MPI's default error handler aborts the job before returning an error; if one was
        // installed that returns instead, stop here rather than train on partial sums.
        assert_eq!(rc, mpi::ffi::MPI_SUCCESS as c_int, "MPI_Allreduce failed with code {rc}");
    }
}
