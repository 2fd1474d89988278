//! The executor's buckets on a GPU: each launch an NCCL sum (or, with sharded optimizer state,
//! reduce-scatter) on the communication stream, each wait point a stream wait, each update a
//! fused optimizer kernel, and the all-gathers of sharded state after the updates.

use cudarc::driver::CudaSlice;

use super::{GpuExec, GpuStep};
use crate::comm::{BucketMember, CommMode};
use crate::cuda::nccl::GpuInFlight;
use crate::cuda::storage::{Cuda, GpuTicket, NoLowRank};
use crate::error::{Error, Result};
use crate::layer::Layer;
use crate::program::{grad_scale, Launch, ParamSlot, Settle};
use crate::trace::Activity;

impl GpuExec<'_> {
    /// Starts summing bucket `index`: all of it, or each rank's shard into that rank.
    fn sum(&self, index: usize, bucket: CudaSlice<f32>) -> Result<GpuInFlight> {
        match self.shards {
            Some(_) => self.comm.reduce_scatter(index, bucket),
            None => self.comm.all_reduce(index, bucket),
        }
    }
}

impl<M> Launch<M, Cuda> for GpuExec<'_> {
    fn grad_scale(&self, micro_steps: usize) -> f32 {
        // As the CPU's: `--compute-only` skips the sums, not the averaging, so that both
        // devices update alike in every mode.
        grad_scale(self.step.world_size, micro_steps)
    }

    fn begin_step(&mut self) {
        self.step.params.optimizer.begin_step();
    }

    fn launch(
        &mut self,
        index: usize,
        bucket: CudaSlice<f32>,
        _: &[BucketMember],
        _: &mut M,
        _: f32,
    ) -> Result<GpuTicket> {
        match self.step.mode {
            CommMode::Overlap => self.step.in_flight[index] = Some(self.sum(index, bucket)?),
            CommMode::AfterBackward => self.step.held.push((index, bucket)),
            CommMode::Skip => self.step.in_flight[index] = Some(GpuInFlight::unreduced(index, bucket)),
        }
        Ok(GpuTicket { bucket: index })
    }

    fn launch_low_rank(
        &mut self,
        _: usize,
        _: CudaSlice<f32>,
        _: &[BucketMember],
        _: &mut M,
        _: f32,
    ) -> Result<NoLowRank> {
        Err(Error::Cuda("PowerSGD does not run on the GPU".into()))
    }

    fn reduce_q(&mut self, p: NoLowRank) -> Result<NoLowRank> {
        match p {}
    }

    /// Notes the group for its bucket's `clear`, after the updates it gathers (see `shards`).
    /// `--compute-only` gathers nothing, as on the CPU.
    fn launch_gather(&mut self, group: usize, bucket: usize, elements: std::ops::Range<usize>) -> Result<()> {
        match self.shards.as_deref_mut() {
            Some(shards) if self.step.mode != CommMode::Skip => shards.ask(group, bucket, elements),
            _ => {}
        }
        Ok(())
    }

    fn backward_done(&mut self) -> Result<()> {
        if self.step.held.is_empty() {
            return Ok(());
        }
        // As DDP without overlap: every reduction starts after backward, and the updates start
        // after all of them.
        for (k, bucket) in std::mem::take(&mut self.step.held) {
            self.step.in_flight[k] = Some(self.sum(k, bucket)?);
        }
        let in_flight = &self.step.in_flight;
        self.step.timeline.span(self.gpu, Activity::WaitAll, |gpu| {
            in_flight.iter().flatten().try_for_each(|f| f.order_before(gpu.compute()))
        })
    }
}

impl<M> Settle<M, Cuda> for GpuExec<'_> {
    fn wait(&mut self, index: usize, ticket: GpuTicket) -> Result<CudaSlice<f32>> {
        debug_assert_eq!(ticket.bucket, index);
        let flight = self.step.in_flight[index].take().expect("a bucket is waited for once, after its launch");
        let (data, events) = self.step.timeline.wait(self.gpu, index, |gpu| flight.wait(gpu.compute()))?;
        let sharded = self.shards.is_some();
        self.step.timeline.all_reduce(index, std::mem::size_of::<f32>() * data.len(), events, sharded);
        Ok(data)
    }

    fn wait_low_rank(&mut self, _: usize, q: NoLowRank) -> Result<CudaSlice<f32>> {
        match q {}
    }

    fn give_back_updated(&mut self, _: &mut CudaSlice<f32>, _: &mut M) -> Result<bool> {
        Ok(false) // nothing is lent on the GPU: the updates are queued after the wait point
    }

    fn update<L: Layer>(
        &mut self,
        _: &mut L,
        _: usize,
        slot: ParamSlot,
        bucket: &CudaSlice<f32>,
        scale: f32,
    ) -> Result<()> {
        if self.step.updating.is_none() {
            let start = self.step.timeline.start(self.gpu)?;
            self.step.updating = Some((slot.bucket, start));
        }
        let Some(shards) = self.shards.as_deref() else {
            let grad = bucket.slice(slot.offset..slot.offset + slot.len);
            return self.step.params.update(self.gpu, slot.index, grad, scale);
        };
        // Sharded: this rank's part alone, whose sums the reduce-scatter left here.
        let part = shards.owned(bucket.len(), slot.offset, slot.len);
        if part.is_empty() {
            return Ok(());
        }
        let grad = bucket.slice(slot.offset + part.start..slot.offset + part.end);
        self.step.params.update_part(self.gpu, slot.index, part, grad, scale)
    }

    /// Nothing to clear: the first backward of a step writes the gradients rather than adding
    /// to them (`accumulate` is false there).
    /// With sharded state, the bucket's all-gathers follow its updates here.
    fn clear(&mut self, index: usize, _: &mut CudaSlice<f32>) -> Result<()> {
        if let Some((bucket, start)) = self.step.updating.take() {
            debug_assert_eq!(bucket, index);
            self.step.timeline.finish(self.gpu, Activity::Update { bucket: bucket as u32 }, start)?;
        }
        if let Some(shards) = self.shards.as_deref_mut() {
            shards.queue_gathers(self.gpu, self.comm, (&mut self.step.params, &mut self.step.timeline), index)?;
        }
        Ok(())
    }

    fn clips(&mut self) -> bool {
        self.step.params.optimizer.grad_clip().is_some()
    }

    fn clip(&mut self, buckets: &[&CudaSlice<f32>], grad_scale: f32) -> Result<f32> {
        // Sharded: each rank's shards hold the sums, so the squares are its shards', summed
        // over the ranks.
        let shards: Option<Vec<_>> = self.shards.as_deref().map(|s| buckets.iter().map(|b| s.shard(b.len())).collect());
        // `--compute-only` sums nothing over the ranks, its norm included.
        let over_ranks = shards.is_some().then_some(self.comm).filter(|_| self.step.mode != CommMode::Skip);
        let GpuStep { params, clip, .. } = &mut *self.step;
        match params.optimizer.grad_clip() {
            Some(rule) => clip.scale(self.gpu, buckets, shards.as_deref(), over_ranks, rule, grad_scale),
            None => Ok(grad_scale),
        }
    }
}
