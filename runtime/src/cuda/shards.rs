//! Sharded optimizer state on the GPU (ZeRO-1), as the CPU shards it: rank `r` owns
//! `shard_of(numel, world, r)` of every bucket, keeps optimizer state for that part of each
//! parameter alone (`owned_part`), and updates only it from the bucket's sums, which the
//! reduce-scatter (`GpuComm::reduce_scatter`) left there. The same ownership as the CPU's, so
//! checkpoints join and split the state the same way (`checkpoint::shards`).
//!
//! The updated parameters then travel back to every rank before the next forward reads them:
//! the generated code asks for each all-gather group at the end of backward
//! (`Launch::launch_gather`), the GPU queues it on the communication stream once its bucket's
//! updates are queued (`Settle::clear`), in the order forward reads them: this rank's parts
//! copied into the bucket's layout, every rank's shard of the group broadcast from it, the
//! group's parameters copied back out. The next forward's wait point for the group makes the
//! compute stream wait for that. When the step is timed, each group's all-gather and each wait
//! point are bracketed by timing events (`Timeline::all_gather`, `take_wait_spans`).

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaSlice, CudaStream};
use overlap_plan::{owned_part, shard_of, Schedule};

use super::gpu::{cuda, Gpu};
use super::nccl::{EventPair, GpuComm};
use super::params::GpuParams;
use super::timing::{timed_event, Timeline};
use crate::error::Result;
use crate::trace::Activity;

/// A sharding rank's all-gathers on the GPU: the buckets' values assembled for them, the groups the
/// step asked for, and the events their wait points wait for.
pub struct GpuShards {
    world: usize,
    rank: usize,
    compute: Arc<CudaStream>,
    comm: Arc<CudaStream>,
    /// Per bucket, its parameters' values in the bucket's layout, for the all-gathers.
    flat: Vec<Option<CudaSlice<f32>>>,
    /// Per bucket, whether this step's updates of it are queued and this rank's parts copied in.
    copied: Vec<bool>,
    /// The all-gather groups the step asked for (`group`, bucket, elements), in the order the
    /// next forward reads them, and how many of them are queued.
    asked: Vec<(usize, usize, Range<usize>)>,
    queued: usize,
    /// Per group, what its wait point waits for, until it has.
    done: Vec<Option<CudaEvent>>,
    /// Per group, its bucket (the trace names wait points by bucket, as on the CPU).
    group_bucket: Vec<usize>,
    /// Whether this step's wait points are timed, and the timing events of those passed.
    timed: bool,
    wait_spans: Vec<(Activity, EventPair)>,
}

impl GpuShards {
    /// For rank `rank` of `world`, with room for every bucket and all-gather group of `schedule`.
    pub fn new(gpu: &Gpu, schedule: &Schedule, world: usize, rank: usize) -> Self {
        GpuShards {
            world,
            rank,
            compute: Arc::clone(gpu.compute()),
            comm: Arc::clone(gpu.comm()),
            flat: (0..schedule.buckets.len()).map(|_| None).collect(),
            copied: vec![false; schedule.buckets.len()],
            asked: Vec::new(),
            queued: 0,
            done: (0..schedule.gather_groups().len()).map(|_| None).collect(),
            group_bucket: schedule.gather_groups().iter().map(|g| g.bucket).collect(),
            timed: false,
            wait_spans: Vec::new(),
        }
    }

    /// This rank's part of a parameter at `offset..offset + len` of a bucket of `numel`, as a
    /// range of the parameter's own elements (empty when it owns none of it).
    pub fn owned(&self, numel: usize, offset: usize, len: usize) -> Range<usize> {
        owned_part(offset, len, &shard_of(numel, self.world, self.rank))
    }

    /// This rank's shard of a bucket of `numel`, as elements of the bucket.
    pub fn shard(&self, numel: usize) -> Range<usize> {
        shard_of(numel, self.world, self.rank)
    }

    /// Forgets what a step that did not finish asked for (its gathers never queued); `timed`:
    /// whether this step's wait points are timed.
    pub fn begin_step(&mut self, timed: bool) {
        self.asked.clear();
        self.queued = 0;
        self.copied.fill(false);
        self.timed = timed;
        self.wait_spans.clear();
    }

    /// The timing events of the wait points passed since the step began, for the timeline.
    pub fn take_wait_spans(&mut self) -> std::vec::Drain<'_, (Activity, EventPair)> {
        self.wait_spans.drain(..)
    }

    /// Notes all-gather `group` (elements `elements` of bucket `bucket`), queued once its
    /// bucket's updates are (`queue_gathers`).
    pub fn ask(&mut self, group: usize, bucket: usize, elements: Range<usize>) {
        self.asked.push((group, bucket, elements));
    }

    /// After bucket `bucket`'s updates are queued on the compute stream: on the communication
    /// stream, this rank's parts of the bucket's parameters copied into its layout; then, in the
    /// order the next forward reads them, every asked group whose bucket is copied so far (each
    /// rank's shard of the group broadcast from it, the group's parameters copied back out).
    /// Buckets are updated in launch order, the reverse of forward's, so the first groups go
    /// once the last bucket is updated, and in forward order from there.
    pub fn queue_gathers(
        &mut self,
        gpu: &Gpu,
        comm: &GpuComm,
        (params, timeline): (&mut GpuParams, &mut Timeline),
        bucket: usize,
    ) -> Result<()> {
        if !self.asked.iter().any(|(_, b, _)| *b == bucket) {
            return Ok(());
        }
        let schedule = params.schedule().clone();
        let numel = schedule.buckets[bucket].numel;
        if self.flat[bucket].is_none() {
            // Allocated on the compute stream, before the ready event the copies below wait for.
            let flat = gpu.compute().alloc_zeros::<f32>(numel.max(1)).map_err(cuda("allocating an all-gather"))?;
            self.flat[bucket] = Some(flat);
        }
        comm.order_after_compute()?;
        let shard = self.shard(numel);
        let flat = self.flat[bucket].as_mut().expect("allocated above");
        for &p in schedule.buckets[bucket].params.iter() {
            let param = schedule.param(p);
            let own = owned_part(param.offset, param.numel(), &shard);
            if !own.is_empty() {
                let at = param.offset + own.start..param.offset + own.end;
                let value = params.value(param.index).slice(own);
                let copy = comm.stream().memcpy_dtod(&value, &mut flat.slice_mut(at));
                copy.map_err(cuda("copying a shard for its all-gather"))?;
            }
        }
        self.copied[bucket] = true;
        while let Some((group, b, elements)) = self.asked.get(self.queued).cloned() {
            if !self.copied[b] {
                break;
            }
            self.queued += 1;
            let flat = self.flat[b].as_mut().expect("copied buckets have their buffer");
            let start = timeline.stamp(comm.stream())?;
            let queued = gather_group(comm, params, &schedule, b, flat, &elements);
            // Recorded whatever happened, so that nothing frees the buffer under queued work.
            self.done[group] = Some(comm.record_done()?);
            queued?;
            if let Some(start) = start {
                let end = timeline.stamp(comm.stream())?.expect("the timeline records: it stamped the start");
                timeline.all_gather(b, elements.len() * std::mem::size_of::<f32>(), (start, end));
            }
        }
        Ok(())
    }

    /// The wait point of all-gather `group`: the compute stream waits for it (the host does not).
    /// Timed, the span between its events is how long the compute stream sat idle for it.
    pub fn wait(&mut self, group: usize) -> Result<()> {
        let Some(done) = self.done.get_mut(group).and_then(Option::take) else { return Ok(()) };
        let start = self.timed.then(|| timed_event(&self.compute)).transpose()?;
        self.compute.wait(&done).map_err(cuda("waiting for an all-gather"))?;
        if let Some(start) = start {
            let activity = Activity::WaitGather { bucket: self.group_bucket[group] as u32 };
            self.wait_spans.push((activity, (start, timed_event(&self.compute)?)));
        }
        Ok(())
    }

    /// Every all-gather's wait point at once (before a forward without wait points, or reading
    /// the parameters back to the host).
    pub fn wait_all(&mut self) -> Result<()> {
        (0..self.done.len()).try_for_each(|g| self.wait(g))
    }
}

impl Drop for GpuShards {
    /// The gather buffers are freed on the compute stream: it waits first for everything queued
    /// on the communication stream (a step that failed may have left copies without an event).
    fn drop(&mut self) {
        if let Ok(queued) = self.comm.record_event(None) {
            let _ = self.compute.wait(&queued);
        }
    }
}

/// Queues group `elements` of bucket `bucket` on the communication stream: every rank's shard of
/// it broadcast from that rank in `flat`, then the group's parameters copied out of `flat`.
fn gather_group(
    comm: &GpuComm,
    params: &mut GpuParams,
    schedule: &Schedule,
    bucket: usize,
    flat: &mut CudaSlice<f32>,
    elements: &Range<usize>,
) -> Result<()> {
    comm.all_gather_pieces(flat, elements)?;
    for &p in schedule.buckets[bucket].params.iter() {
        let param = schedule.param(p);
        let part = owned_part(param.offset, param.numel(), elements);
        if !part.is_empty() {
            let at = param.offset + part.start..param.offset + part.end;
            let mut value = params.value_mut(param.index).slice_mut(part);
            let copy = comm.stream().memcpy_dtod(&flat.slice(at), &mut value);
            copy.map_err(cuda("copying gathered parameters back"))?;
        }
    }
    Ok(())
}
