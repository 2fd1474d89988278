//! The GPU behind the `Trainer`'s one loop: the step queued on the GPU's streams, one host
//! synchronisation at its end, the host model and optimizer brought up to date only for a
//! checkpoint and at the end.

use super::gpu::Gpu;
use super::loss::GpuCrossEntropy;
use super::nccl::GpuComm;
use super::optim::GpuOptimizer;
use super::params::GpuParams;
use super::program::{check_supported, GpuStep};
use super::shards::GpuShards;
use super::storage::{Cuda, GpuTensor};
use super::timing::Timeline;
use crate::backend::StepBackend;
use crate::comm::{Communicator, WireFormat};
use crate::config::TrainConfig;
use crate::data::Batch;
use crate::error::{Error, Result};
use crate::loss::{DeviceLoss, Loss};
use crate::model::DistributedModel;
use crate::optim::ChosenOptimizer;
use crate::program::Gather;
use crate::trace::Activity;

/// What opening the GPU backend needs besides the model.
pub struct GpuSetup<'a> {
    /// The GPU of this rank.
    pub ordinal: usize,
    /// The run's settings: the optimizer's among them, and those the GPU cannot honour yet, which
    /// `open` refuses.
    pub config: &'a TrainConfig,
    /// Record timing events (the report, trace or timeline asked for spans).
    pub timed: bool,
}

/// The model's program on this rank's GPU, with its workspace, buckets and loss there.
pub struct GpuBackend<'a, M: DistributedModel> {
    model: &'a mut M,
    /// The host copy of the optimizer state, filled only for a checkpoint.
    snapshot: ChosenOptimizer,
    config: &'a TrainConfig,
    comm: &'a Communicator,
    // Dropped in this order: the device tensors, the parameters and buckets in flight, the NCCL
    // communicator, and the GPU last.
    ws: M::WorkspaceOn<Cuda>,
    /// The buckets between steps (`None` while in flight, or after a failed step).
    grads: Option<M::GradsOn<Cuda>>,
    in_flight: Option<M::InFlightOn<Cuda>>,
    input: GpuTensor,
    loss: GpuCrossEntropy,
    labels: Vec<u32>,
    /// This rank's parts of the optimizer state and the all-gathers, when the run shards it.
    shards: Option<GpuShards>,
    step: GpuStep,
    gpu_comm: GpuComm,
    gpu: Gpu,
}

/// The next forward's wait points for the all-gathers of sharded state.
struct GpuGather<'a> {
    shards: &'a mut GpuShards,
}

impl<M> Gather<M, Cuda> for GpuGather<'_> {
    fn wait_gather(&mut self, group: usize, _: &mut M) -> Result<()> {
        self.shards.wait(group)
    }

    fn wait_all_gathers(&mut self, _: &mut M) -> Result<()> {
        self.shards.wait_all()
    }
}

impl<'a, M: DistributedModel> GpuBackend<'a, M> {
    /// Opens the GPU, copies `model` (and `optimizer`'s state, after a resume) to it, and joins
    /// the NCCL communicator. Refuses, before touching a GPU, layers and losses without device
    /// kernels and gradients that travel compressed.
    pub fn open(
        setup: GpuSetup<'a>,
        model: &'a mut M,
        optimizer: ChosenOptimizer,
        comm: &'a Communicator,
        loss: &impl Loss,
    ) -> Result<Self> {
        check_supported::<M>()?;
        if let Some(chosen) = M::SCHEDULE.grad_comm() {
            return Err(Error::GradCommOnGpu { model: M::SCHEDULE.model.to_string(), chosen });
        }
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
            (comm.checks_finite(), "checking that the sums are finite (`CommConfig::check_finite`)"),
            (
                comm.wire_format_chosen()
                    && (0..M::SCHEDULE.buckets.len()).any(|b| comm.wire_format(&M::SCHEDULE, b) != WireFormat::Fp32),
                "gradients on the wire narrower than FP32 (`CommConfig::grad_comm`)",
            ),
        ]
        .into_iter()
        .filter_map(|(asked, what)| asked.then_some(what))
        .collect();
        if !cpu_only.is_empty() {
            return Err(Error::Config(format!("not supported on the GPU yet: {}", cpu_only.join(", "))));
        }
        let mut gpu = Gpu::open(setup.ordinal)?;
        gpu.set_wait_bound(comm.wait_timeout(), comm.rank());
        let shards = comm
            .shards_optimizer(&M::SCHEDULE)
            .then(|| GpuShards::new(&gpu, &M::SCHEDULE, comm.world_size(), comm.rank()));
        let chosen = GpuOptimizer::like(&optimizer, &config.optimizer, &M::SCHEDULE);
        let sharded = shards.is_some().then_some((comm.world_size(), comm.rank()));
        let mut params = GpuParams::new(&gpu, &*model, chosen, sharded)?;
        params.load_state(&gpu, &optimizer)?;
        let gpu_comm = GpuComm::new(&gpu, comm, setup.timed)?;
        let timeline = Timeline::new(setup.timed);
        let mut step = GpuStep::new(params, &M::SCHEDULE, comm.mode(), comm.world_size(), timeline);
        let grads = Some(model.new_grads_on(&mut step.on(&gpu, &gpu_comm))?);
        Ok(GpuBackend {
            model,
            snapshot: optimizer,
            config,
            comm,
            ws: Default::default(),
            grads,
            in_flight: None,
            input: GpuTensor::default(),
            loss: GpuCrossEntropy::default(),
            labels: Vec::new(),
            shards,
            step,
            gpu_comm,
            gpu,
        })
    }
}

impl<M: DistributedModel> GpuBackend<'_, M> {
    /// Orders the compute stream after every all-gather of sharded state in flight, before the
    /// parameters are copied to the host (the copies run on it).
    fn gathered(&mut self) -> Result<()> {
        let Some(shards) = self.shards.as_mut() else { return Ok(()) };
        shards.wait_all()?;
        // Within the bound: the all-gathers wait for every rank.
        let finished = self.gpu.finish("waiting for the all-gathers of sharded optimizer state");
        self.ended_by(finished)
    }

    /// `result`, after abandoning NCCL's communicator when it is a wait for the GPU that timed
    /// out: dropping it would wait for sums that may never end (see `GpuComm::abandon`).
    fn ended_by<T>(&mut self, result: Result<T>) -> Result<T> {
        if let Err(Error::CollectiveTimeout { .. }) = &result {
            self.gpu_comm.abandon();
        }
        result
    }
}

impl<M: DistributedModel> StepBackend<M> for GpuBackend<'_, M> {
    fn begin_step(&mut self, _step: u64) -> Result<()> {
        // Buckets a failed step left in flight are freed after their sums (see `GpuInFlight`).
        self.step.drop_in_flight();
        self.in_flight = None;
        if let Some(shards) = self.shards.as_mut() {
            shards.begin_step(self.step.timeline.is_enabled());
        }
        if self.grads.is_none() {
            self.grads = Some(self.model.new_grads_on(&mut self.step.on(&self.gpu, &self.gpu_comm))?);
        }
        self.step.timeline.begin_step(&self.gpu)
    }

    fn set_lr(&mut self, lr: f64) {
        self.step.params.optimizer.set_lr(lr);
    }

    fn forward_loss(&mut self, batch: &Batch, _loss: &dyn Loss, want_loss: bool) -> Result<f64> {
        self.labels.clear();
        self.labels.extend(batch.labels.iter().map(|&l| l as u32));
        // Token ids are checked there, before they are uploaded.
        self.input.upload_batch::<M>(&self.gpu, &batch.inputs)?;
        let mut dev = self.step.on(&self.gpu, &self.gpu_comm);
        let logits = match self.shards.as_mut() {
            // Each all-gather's wait point right before the first layer that reads it.
            Some(shards) => self.model.forward_gathering_on(
                &mut dev,
                &mut GpuGather { shards },
                &batch.context,
                &self.input,
                &mut self.ws,
            )?,
            None => self.model.forward_on(&mut dev, &batch.context, &self.input, &mut self.ws)?,
        };
        // The kernel reads the logit each label names: checked here as on the CPU.
        crate::loss::check_class_labels(&batch.labels, logits.rows(), logits.cols())?;
        let (loss, labels) = (&mut self.loss, &self.labels);
        self.step.timeline.span(&self.gpu, Activity::Loss, |gpu| loss.forward_backward(gpu, logits, labels))?;
        // Copying the loss out waits for the GPU: only on the steps that log it.
        if want_loss {
            let waited = self.gpu.finish("finishing forward on the GPU to read the loss");
            self.ended_by(waited)?;
            self.loss.mean_loss(&self.gpu)
        } else {
            Ok(0.0)
        }
    }

    fn held_out_loss(&mut self, batch: &Batch, loss: &dyn Loss) -> Result<f64> {
        let timed = self.step.timeline.set_enabled(false);
        let value = self.forward_loss(batch, loss, true);
        self.step.timeline.set_enabled(timed);
        value
    }

    fn backward(&mut self, _micro: usize, last: bool) -> Result<()> {
        let grads = self.grads.as_mut().ok_or_else(|| Error::Config("backward twice in one step".into()))?;
        if !last {
            let mut dev = self.step.on(&self.gpu, &self.gpu_comm);
            return self.model.backward_no_sync_on(&mut dev, &mut self.ws, self.loss.grad(), grads);
        }
        let grads = self.grads.take().expect("checked above");
        self.step.set_mode(self.comm.mode());
        let mut dev = self.step.sharding(&self.gpu, &self.gpu_comm, self.shards.as_mut());
        self.in_flight = Some(self.model.backward_on(&mut dev, &mut self.ws, self.loss.grad(), grads)?);
        Ok(())
    }

    fn step(&mut self, meanwhile: &mut dyn FnMut()) -> Result<()> {
        let in_flight = self.in_flight.take().ok_or_else(|| Error::Config("a step without a backward".into()))?;
        let mut dev = self.step.sharding(&self.gpu, &self.gpu_comm, self.shards.as_mut());
        let stepped = self.model.step_on(&mut dev, in_flight);
        let stepped = self.ended_by(stepped)?;
        self.grads = Some(stepped);
        // The GPU holds the most queued work now, backward's tail and every update.
        meanwhile();
        let finished = self.gpu.finish("finishing a step on the GPU");
        self.ended_by(finished)?;
        if let Some(shards) = self.shards.as_mut() {
            self.step.timeline.add_spans(shards.take_wait_spans());
        }
        self.step.timeline.end_step()
    }

    fn grad_norm(&mut self) -> Option<f32> {
        self.step.params.optimizer.grad_clip().and_then(|clip| clip.last_norm())
    }

    /// With sharded state: this rank's parts, as the CPU's sharded optimizer holds them (the
    /// checkpoint joins them from every rank).
    fn host_state(&mut self) -> Result<(&M, &ChosenOptimizer)> {
        self.gathered()?;
        self.snapshot = self.config.optimizer.build(&M::SCHEDULE);
        self.step.params.save_state(&self.gpu, self.model, &mut self.snapshot)?;
        Ok((self.model, &self.snapshot))
    }

    fn finish(&mut self) -> Result<()> {
        self.gathered()?;
        self.step.params.download(&self.gpu, self.model)
    }

    fn describe(&self) -> Option<String> {
        Some(self.gpu.describe())
    }
}
