//! A model's parameters and their optimizer state on the GPU, by the parameter's index in the
//! schedule, and their way to and from the host model (at the start, for a checkpoint, at the
//! end).

use std::ops::Range;

use cudarc::driver::{CudaSlice, CudaView};
use overlap_plan::{owned_part, shard_of, Schedule};

use super::gpu::{cuda, Gpu};
use super::optim::{GpuOptimizer, ParamState};
use crate::error::Result;
use crate::model::DistributedModel;
use crate::optim::{ChosenOptimizer, OptimizerState};

/// The model's parameters on the GPU, by `ParamInfo::index`, with their optimizer state: whole, or
/// this rank's part of it when the run shards it.
pub struct GpuParams {
    schedule: Schedule,
    /// By parameter index (`ParamInfo::index`).
    values: Vec<CudaSlice<f32>>,
    states: Vec<ParamState>,
    /// Per layer, the indices of its parameters in `Layer::PARAMS` order.
    by_layer: Vec<Vec<usize>>,
    pub(super) optimizer: GpuOptimizer,
    /// By parameter index, a checkpoint's buffers this optimizer has no use for (SGD's momentum,
    /// resumed without momentum): saved again in this run's checkpoints, as the CPU and PyTorch
    /// keep a state they do not read.
    carried: Vec<Option<Vec<Vec<f32>>>>,
}

impl GpuParams {
    /// Copies `model`'s parameters to the GPU, with zeroed optimizer state: for each parameter
    /// whole, or, with `sharded` (`(world, rank)` of a run that shards the state), for this
    /// rank's part of it alone (`owned_part` of its bucket's `shard_of`, as `GpuShards` updates).
    pub fn new<M: DistributedModel>(
        gpu: &Gpu,
        model: &M,
        optimizer: GpuOptimizer,
        sharded: Option<(usize, usize)>,
    ) -> Result<Self> {
        let schedule = M::SCHEDULE;
        let count = schedule.params().count();
        let (mut values, mut states) = (Vec::with_capacity(count), Vec::with_capacity(count));
        for p in schedule.params() {
            let info = schedule.param(p);
            debug_assert_eq!(info.index, values.len(), "parameters are indexed in definition order");
            let host = model.param(p);
            values.push(gpu.compute().clone_htod(host).map_err(cuda("copying parameters to the GPU"))?);
            let kept = sharded.map_or(host.len(), |(world, rank)| {
                let shard = shard_of(schedule.buckets[info.bucket].numel, world, rank);
                owned_part(info.offset, host.len(), &shard).len()
            });
            states.push(optimizer.new_state(gpu, kept)?);
        }
        let by_layer = schedule.layers.iter().map(|l| l.params.iter().map(|p| p.index).collect()).collect();
        Ok(GpuParams { schedule, values, states, by_layer, optimizer, carried: Vec::new() })
    }

    /// Parameter `param` (in `Layer::PARAMS` order) of layer `layer`.
    pub fn of_layer(&self, layer: usize, param: usize) -> CudaView<'_, f32> {
        self.values[self.by_layer[layer][param]].as_view()
    }

    /// Queues parameter `index`'s update from its summed gradient.
    pub fn update(&mut self, gpu: &Gpu, index: usize, grad: CudaView<f32>, grad_scale: f32) -> Result<()> {
        let value = &mut self.values[index].as_view_mut();
        self.optimizer.update(gpu, index, value, &mut self.states[index], grad, grad_scale)
    }

    /// Queues the update of elements `part` of parameter `index` (this rank's, whose state alone
    /// it keeps when the run shards it) from their summed gradients.
    pub fn update_part(
        &mut self,
        gpu: &Gpu,
        index: usize,
        part: Range<usize>,
        grad: CudaView<f32>,
        grad_scale: f32,
    ) -> Result<()> {
        let value = &mut self.values[index].slice_mut(part);
        self.optimizer.update(gpu, index, value, &mut self.states[index], grad, grad_scale)
    }

    /// The schedule the parameters are laid out by.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Parameter `index`'s values (for the all-gathers of sharded state).
    pub(super) fn value(&self, index: usize) -> &CudaSlice<f32> {
        &self.values[index]
    }

    pub(super) fn value_mut(&mut self, index: usize) -> &mut CudaSlice<f32> {
        &mut self.values[index]
    }

    /// Copies every parameter back into `model` (for saving, or comparing with the CPU).
    pub fn download<M: DistributedModel>(&self, gpu: &Gpu, model: &mut M) -> Result<()> {
        for p in self.schedule.params() {
            let index = self.schedule.param(p).index;
            let host = gpu.compute().clone_dtoh(&self.values[index]).map_err(cuda("copying parameters out"))?;
            model.param_mut(p).copy_from_slice(&host);
        }
        Ok(())
    }

    /// Copies the parameters into `model` and the optimizer state into `into` (a fresh
    /// optimizer of the same kind), for a checkpoint.
    pub fn save_state<M: DistributedModel>(&self, gpu: &Gpu, model: &mut M, into: &mut ChosenOptimizer) -> Result<()> {
        self.download(gpu, model)?;
        if let Some(step) = self.optimizer.step_count() {
            into.set_step_count(step);
        }
        for (index, state) in self.states.iter().enumerate() {
            let carried = self.carried.get(index).and_then(Option::as_ref);
            if let Some(buffers) = state.download(gpu, &self.optimizer)?.as_ref().or(carried) {
                into.set_buffers(index, &buffers.iter().map(Vec::as_slice).collect::<Vec<_>>());
            }
        }
        Ok(())
    }

    /// Restores the optimizer state a checkpoint loaded into `from` (the parameters came with
    /// the host model this was built from).
    pub fn load_state(&mut self, gpu: &Gpu, from: &ChosenOptimizer) -> Result<()> {
        // A checkpoint's momentum buffers, resumed without momentum, have nothing to go to: they
        // stay on the host, for this run's checkpoints.
        if !self.optimizer.keeps_buffers() {
            self.carried = (0..self.states.len())
                .map(|index| from.buffers(index).map(|buffers| buffers.iter().map(|b| b.to_vec()).collect()))
                .collect();
            return Ok(());
        }
        for (index, state) in self.states.iter_mut().enumerate() {
            if let Some(buffers) = from.buffers(index) {
                state.upload(gpu, &buffers)?;
            }
        }
        Ok(())
    }
}
