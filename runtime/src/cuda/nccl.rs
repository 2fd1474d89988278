//! Gradient all-reduces on the GPU: NCCL on its own stream, ordered against the compute stream
//! by events only, so the host never blocks inside backward.
//!
//! Launching bucket k: record an event on the compute stream after the backward kernels that
//! complete it, make the communication stream wait for it, queue NCCL's in-place sum there and
//! record a "done" event. Waiting for bucket k: the compute stream waits for that event right
//! before bucket k's update; the host does not wait at all. As on the CPU, an in-flight bucket
//! is owned by its handle, so no kernel can be queued on it before its wait.
//!
//! `cudarc::nccl::Comm` is `!Send`: it stays on the thread that trains, which is also the only
//! thread that queues GPU work.

use std::mem::ManuallyDrop;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream};
use cudarc::nccl::{group_end, group_start, Comm, Id, ReduceOp};
use overlap_plan::{shard_of, shard_within};

use super::gpu::{cuda, Gpu};
use super::libraries;
use crate::comm::Communicator;
use crate::error::{Error, Result};

/// Start and end events of something timed on a stream.
pub type EventPair = (CudaEvent, CudaEvent);

/// The NCCL communicator of this job's GPU ranks. It exists at every world size, one rank
/// included (as PyTorch DDP's on one GPU), so that a single GPU runs the same event-ordered
/// path as a cluster: own stream, ready and done events, in-place all-reduce.
pub struct GpuComm {
    /// In `ManuallyDrop`: cudarc's `Comm` panics if `ncclCommAbort` fails, which it does after a
    /// sticky CUDA error; see `Drop`.
    nccl: ManuallyDrop<Comm>,
    compute: Arc<CudaStream>,
    comm: Arc<CudaStream>,
    /// Record timing events around each all-reduce (for the trace and the report).
    timed: bool,
    /// `abandon` left the communicator to the process's exit.
    abandoned: bool,
}

/// A bucket being summed on the communication stream. `wait` is the only way back to it.
#[must_use = "an in-flight bucket must be waited on before its gradients can be used"]
pub struct GpuInFlight {
    /// The bucket's index, in launch order.
    pub bucket: usize,
    /// `Some` until `wait` hands it back.
    data: Option<CudaSlice<f32>>,
    /// Recorded on the communication stream after the sum; `None` when nothing was reduced.
    done: Option<CudaEvent>,
    /// A timing event just before the all-reduce, when timed (`done` ends it).
    started: Option<CudaEvent>,
}

impl GpuComm {
    /// Creates the NCCL communicator over `comm`'s ranks: rank 0 makes the unique id, MPI
    /// broadcasts it, every rank joins with its GPU's communication stream.
    pub fn new(gpu: &Gpu, comm: &Communicator, timed: bool) -> Result<Self> {
        let (compute, stream) = (Arc::clone(gpu.compute()), Arc::clone(gpu.comm()));
        // cudarc panics on first use of a library it cannot open, hence the check.
        let located = libraries::prepare().map_err(Error::Cuda)?;
        libraries::check_nccl_name(located).map_err(Error::Cuda)?;
        let mut bytes = [0u8; 128];
        if comm.rank() == 0 {
            let id = Id::new().map_err(cuda("creating the NCCL unique id"))?;
            for (b, c) in bytes.iter_mut().zip(id.internal()) {
                *b = *c as u8;
            }
        }
        comm.broadcast_bytes_from_root(&mut bytes)?;
        let id = Id::uninit(bytes.map(|b| b as std::ffi::c_char));
        let nccl = Comm::from_rank(Arc::clone(&stream), comm.rank(), comm.world_size(), id)
            .map_err(cuda("joining the NCCL communicator"))?;
        Ok(GpuComm { nccl: ManuallyDrop::new(nccl), compute, comm: stream, timed, abandoned: false })
    }

    /// Starts summing `data` (bucket `bucket`) over all ranks, after the kernels queued so far
    /// on the compute stream, and returns the handle that owns it meanwhile.
    pub fn all_reduce(&self, bucket: usize, data: CudaSlice<f32>) -> Result<GpuInFlight> {
        self.sum_with(bucket, data, |nccl, data| {
            nccl.all_reduce_in_place(data, &ReduceOp::Sum).map(drop).map_err(cuda("NCCL all-reduce"))
        })
    }

    /// Starts summing each rank's shard of `data` (`shard_of`, balanced to the element, as the
    /// CPU's) into that rank's `data` alone: one in-place reduce per rank, rooted at it, in one
    /// NCCL group, since `ncclReduceScatter` needs equal shards. The handle owns `data`
    /// meanwhile; only this rank's shard holds sums afterwards.
    pub fn reduce_scatter(&self, bucket: usize, data: CudaSlice<f32>) -> Result<GpuInFlight> {
        let world = self.nccl.world_size();
        self.sum_with(bucket, data, |nccl, data| {
            grouped(|| {
                for rank in 0..world {
                    let shard = shard_of(data.len(), world, rank);
                    if !shard.is_empty() {
                        let mut view = data.slice_mut(shard);
                        nccl.reduce_in_place(&mut view, &ReduceOp::Sum, rank as i32).map_err(cuda("NCCL reduce"))?;
                    }
                }
                Ok(())
            })
        })
    }

    /// Queues, on the communication stream, the copy of every rank's shard of `range` of `data`
    /// (a bucket's values, `shard_within`) to every other rank: one in-place broadcast per rank,
    /// rooted at it, in one NCCL group (the shards differ in length by up to one element, which
    /// `ncclAllGather` does not allow).
    pub fn all_gather_pieces(&self, data: &mut CudaSlice<f32>, range: &Range<usize>) -> Result<()> {
        self.check_usable()?;
        let world = self.nccl.world_size();
        grouped(|| {
            for rank in 0..world {
                let piece = shard_within(data.len(), world, rank, range);
                if !piece.is_empty() {
                    let mut view = data.slice_mut(piece);
                    self.nccl.broadcast_in_place(&mut view, rank as i32).map_err(cuda("NCCL broadcast"))?;
                }
            }
            Ok(())
        })
    }

    /// Sums `values` over the ranks in place, on the communication stream, ordered after the
    /// compute stream's work so far and before its next (the clipping norm's partial sums of a
    /// sharded run).
    pub fn sum_f64_in_place(&self, values: &mut CudaSlice<f64>) -> Result<()> {
        self.check_usable()?;
        self.order_after_compute()?;
        self.nccl.all_reduce_in_place(values, &ReduceOp::Sum).map_err(cuda("NCCL all-reduce of the norm"))?;
        self.order_before_compute()
    }

    /// The communication stream, for the copies around the all-gathers.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.comm
    }

    /// Makes the communication stream wait for everything queued on the compute stream so far.
    pub fn order_after_compute(&self) -> Result<()> {
        let ready = self.compute.record_event(None).map_err(cuda("recording a ready event"))?;
        self.comm.wait(&ready).map_err(cuda("ordering the communication stream"))
    }

    /// Makes the compute stream wait for everything queued on the communication stream so far.
    fn order_before_compute(&self) -> Result<()> {
        let done = self.comm.record_event(None).map_err(cuda("recording a done event"))?;
        self.compute.wait(&done).map_err(cuda("ordering the compute stream"))
    }

    /// Records an event after the communication stream's work so far (a wait point's).
    pub fn record_done(&self) -> Result<CudaEvent> {
        let flags = Some(CUevent_flags::CU_EVENT_DISABLE_TIMING);
        self.comm.record_event(flags).map_err(cuda("recording a done event"))
    }

    fn check_usable(&self) -> Result<()> {
        if self.abandoned {
            return Err(Error::Cuda("NCCL's communicator was abandoned after a wait for the GPU timed out".into()));
        }
        Ok(())
    }

    /// Queues `sum` of `data` on the communication stream after the compute stream's work so
    /// far, between the events the handle keeps.
    fn sum_with(
        &self,
        bucket: usize,
        mut data: CudaSlice<f32>,
        sum: impl FnOnce(&Comm, &mut CudaSlice<f32>) -> Result<()>,
    ) -> Result<GpuInFlight> {
        self.check_usable()?;
        self.order_after_compute()?;
        let started = self.timed.then(|| self.comm.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))).transpose();
        let started = started.map_err(cuda("recording a timing event"))?;
        let reduced = sum(&self.nccl, &mut data);
        // When timed, the done event is also the end of the all-reduce's span: the compute stream
        // waits for it, so it has completed once the step is synchronised. It is recorded even
        // when NCCL refused the call, so that the bucket is freed only after the stream is past it.
        let flags = if self.timed { CUevent_flags::CU_EVENT_DEFAULT } else { CUevent_flags::CU_EVENT_DISABLE_TIMING };
        let done = self.comm.record_event(Some(flags)).map_err(cuda("recording a reduced event"));
        let flight = GpuInFlight { bucket, data: Some(data), done: done.ok(), started };
        reduced?;
        if flight.done.is_none() {
            // Without the event nothing orders the bucket's reuse after NCCL: wait here, on the host.
            self.comm.synchronize().map_err(cuda("waiting for NCCL after a failed event record"))?;
            return Err(Error::Cuda("recording a reduced event failed".into()));
        }
        Ok(flight)
    }
}

impl GpuComm {
    /// Leaves the communicator, with its sums in flight, to the process's exit: after a wait for
    /// the GPU timed out, a peer is gone and the streams would never drain, so neither
    /// `ncclCommAbort` (which can block on them too) nor a synchronising drop is safe to call.
    /// Later all-reduces are refused.
    pub fn abandon(&mut self) {
        self.abandoned = true;
    }
}

impl Drop for GpuComm {
    /// Aborts the communicator only while both streams are healthy; after a sticky CUDA error
    /// the abort fails, cudarc would panic, and the error already reported would be lost.
    fn drop(&mut self) {
        if self.abandoned {
            return; // the communicator stays undropped: see `abandon`
        }
        if self.compute.synchronize().is_ok() && self.comm.synchronize().is_ok() {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.nccl) };
        }
    }
}

impl GpuInFlight {
    /// A bucket that is not reduced (a gradient-accumulation micro-step, or `--compute-only`).
    pub fn unreduced(bucket: usize, data: CudaSlice<f32>) -> Self {
        GpuInFlight { bucket, data: Some(data), done: None, started: None }
    }

    /// Makes `stream` wait for the sum, keeping the bucket in flight.
    pub fn order_before(&self, stream: &CudaStream) -> Result<()> {
        match &self.done {
            Some(done) => stream.wait(done).map_err(cuda("waiting for a reduced bucket")),
            None => Ok(()),
        }
    }

    /// Makes the compute stream wait for the sum (the host does not wait) and gives the bucket
    /// back; every kernel queued on it afterwards runs after the reduction.
    /// Also returns the all-reduce's timing events, when it was timed.
    pub fn wait(mut self, compute: &CudaStream) -> Result<(CudaSlice<f32>, Option<EventPair>)> {
        self.order_before(compute)?;
        let data = self.data.take().expect("a bucket is handed back once");
        Ok((data, self.started.take().zip(self.done.take())))
    }
}

impl Drop for GpuInFlight {
    /// A bucket dropped in flight (an error path) is freed on the compute stream, where it was
    /// allocated: make that stream wait for the sum first, so NCCL never writes freed memory.
    /// If even that wait cannot be queued, wait on the host; if the GPU is gone, there is
    /// nothing left to order, and the memory is kept rather than freed under a running kernel.
    fn drop(&mut self) {
        let (Some(data), Some(done)) = (self.data.take(), self.done.take()) else { return };
        let ordered = data.stream().wait(&done).is_ok() || done.synchronize().is_ok();
        if !ordered {
            std::mem::forget(data);
        }
    }
}

/// Runs `calls` between `ncclGroupStart` and `ncclGroupEnd`, which is always called once the
/// group started, so that NCCL is never left inside a group.
fn grouped(calls: impl FnOnce() -> Result<()>) -> Result<()> {
    group_start().map_err(cuda("starting an NCCL group"))?;
    let queued = calls();
    let ended = group_end().map_err(cuda("ending an NCCL group"));
    queued.and(ended.map(drop))
}
