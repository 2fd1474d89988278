//! The GPU behind the `Trainer`'s one loop: the step queued on the GPU's streams, one host
//! synchronisation at its end, the host model and optimizer brought up to date only for a
//! checkpoint and at the end.

use super::gpu::Gpu;
use super::model::{check_supported, GpuModel};
use super::nccl::{GpuComm, GpuInFlight};
use super::optim::GpuOptimizer;
use super::timing::Timeline;
use crate::backend::StepBackend;
use crate::comm::{CommMode, Communicator};
use crate::config::TrainConfig;
use crate::data::Batch;
use crate::error::{Error, Result};
use crate::loss::{DeviceLoss, Loss};
use crate::model::{grad_scale, DistributedModel};
use crate::optim::ChosenOptimizer;

/// What opening the GPU backend needs besides the model.
pub struct GpuSetup<'a> {
    /// The GPU of this rank.
    pub ordinal: usize,
    pub config: &'a TrainConfig,
    /// Rows of a micro-batch: samples × positions per sample (every device layer is per row).
    pub rows: usize,
    /// Record timing events (the report, trace or timeline asked for spans).
    pub timed: bool,
}

pub struct GpuBackend<'a, M: DistributedModel> {
    model: &'a mut M,
    /// The host copy of the optimizer state, filled only for a checkpoint.
    snapshot: ChosenOptimizer,
    config: &'a TrainConfig,
    comm: &'a Communicator,
    // Dropped in this order: the NCCL communicator and the device tensors before the GPU.
    gpu_comm: GpuComm,
    device: GpuModel,
    timeline: Timeline,
    gpu: Gpu,
    in_flight: Vec<GpuInFlight>,
    labels: Vec<u32>,
}

impl<'a, M: DistributedModel> GpuBackend<'a, M> {
    /// Opens the GPU, copies `model` (and `optimizer`'s state, after a resume) to it, and joins
    /// the NCCL communicator. Refuses, before touching a GPU, layers and losses without device
    /// kernels.
    pub fn open(
        setup: GpuSetup<'a>,
        model: &'a mut M,
        optimizer: ChosenOptimizer,
        comm: &'a Communicator,
        loss: &impl Loss,
    ) -> Result<Self> {
        check_supported::<M>()?;
        if loss.device_loss() != Some(DeviceLoss::SoftmaxCrossEntropy) {
            return Err(Error::Cuda(format!(
                "the loss {} has no GPU kernel (only CrossEntropyLoss has): train it on the CPU",
                loss.name()
            )));
        }
        let config = setup.config;
        let cpu_only: Vec<&str> = [
            (comm.emulated_link().is_some(), "an emulated link"),
            (config.observe.write_profile.is_some(), "writing a profile"),
            (!config.observe.simulate.is_empty(), "simulating other clusters"),
        ]
        .into_iter()
        .filter_map(|(asked, what)| asked.then_some(what))
        .collect();
        if !cpu_only.is_empty() {
            return Err(Error::Config(format!("not supported on the GPU yet: {}", cpu_only.join(", "))));
        }
        let gpu = Gpu::open(setup.ordinal)?;
        let mut device = GpuModel::new(&gpu, &*model, setup.rows, GpuOptimizer::like(&optimizer, &config.optimizer))?;
        device.load_state(&gpu, &optimizer)?;
        let timeline = Timeline::new(setup.timed);
        let gpu_comm = GpuComm::new(&gpu, comm, setup.timed)?;
        Ok(GpuBackend {
            model,
            snapshot: optimizer,
            config,
            comm,
            gpu_comm,
            device,
            timeline,
            gpu,
            in_flight: Vec::new(),
            labels: Vec::new(),
        })
    }
}

impl<M: DistributedModel> StepBackend<M> for GpuBackend<'_, M> {
    fn begin_step(&mut self, _step: u64) -> Result<()> {
        // Buckets a failed step left in flight are freed after their sums (see `GpuInFlight`).
        self.in_flight.clear();
        self.timeline.begin_step(&self.gpu)
    }

    fn forward_loss(&mut self, batch: &Batch, _loss: &dyn Loss, want_loss: bool) -> Result<f64> {
        self.labels.clear();
        self.labels.extend(batch.labels.iter().map(|&l| l as u32));
        self.device.forward_loss(&self.gpu, batch.inputs.as_slice(), &self.labels, &mut self.timeline)?;
        // Copying the loss out waits for the GPU: only on the steps that log it.
        if want_loss {
            self.device.loss(&self.gpu)
        } else {
            Ok(0.0)
        }
    }

    fn backward(&mut self, micro: usize, last: bool) -> Result<()> {
        let mode = if last { self.comm.mode() } else { CommMode::Skip };
        let buckets = self.device.backward(&self.gpu, &self.gpu_comm, (mode, micro > 0), &mut self.timeline)?;
        if last {
            self.in_flight = buckets;
            Ok(())
        } else {
            self.device.keep_gradients(&self.gpu, buckets)
        }
    }

    fn step(&mut self) -> Result<()> {
        let reducing = if self.comm.mode() == CommMode::Skip { 1 } else { self.comm.world_size() };
        let scale = grad_scale(reducing, self.config.accumulate);
        let in_flight = std::mem::take(&mut self.in_flight);
        self.device.step(&self.gpu, in_flight, scale, &mut self.timeline)?;
        self.gpu.synchronize()?;
        self.timeline.end_step()
    }

    fn host_state(&mut self) -> Result<(&M, &ChosenOptimizer)> {
        self.snapshot = self.config.optimizer.build();
        self.device.save_state(&self.gpu, self.model, &mut self.snapshot)?;
        Ok((self.model, &self.snapshot))
    }

    fn finish(&mut self) -> Result<()> {
        self.device.download(&self.gpu, self.model)
    }

    fn describe(&self) -> Option<String> {
        Some(self.gpu.describe())
    }
}
