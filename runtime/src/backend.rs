//! One training step's work on a device, behind one contract, so that the `Trainer` has one loop
//! for the CPU and the GPU. The CPU side is the code `#[distributed_model]` emitted; the GPU
//! side (`cuda::GpuBackend`) executes the same compiled schedule with kernels and NCCL. The
//! contract sits below both the training loop (`train`, which drives it) and the devices (which
//! implement it), as candle keeps `BackendDevice` below its devices: neither imports the other
//! back.

use overlap_plan::Schedule;

use crate::comm::{Communicator, GradBucket};
use crate::data::Batch;
use crate::error::{Error, Result};
use crate::fault;
use crate::layer::{check_token_ids, DeviceOp};
use crate::loss::Loss;
use crate::model::{DistributedModel, GradientBuckets};
use crate::optim::{ChosenOptimizer, Optimizer};
use crate::tensor::Matrix;
use crate::trace;

/// A device that runs one step as forward and loss per micro-batch, backward per micro-batch,
/// then the step.
pub(crate) trait StepBackend<M: DistributedModel> {
    /// Before the first micro-batch of step `step` (0-based).
    fn begin_step(&mut self, step: u64) -> Result<()>;

    /// The learning rate of the steps from now on (set before a step by an `LrSchedule`).
    fn set_lr(&mut self, lr: f64);

    /// Forward and the loss on `batch`; returns this rank's mean loss over it. A device that
    /// must copy the value out may return 0 when `want_loss` is false.
    fn forward_loss(&mut self, batch: &Batch, loss: &dyn Loss, want_loss: bool) -> Result<f64>;

    /// The mean loss on a held-out `batch`: forward and the loss only, outside any step, so
    /// recorded in no step's spans.
    fn held_out_loss(&mut self, batch: &Batch, loss: &dyn Loss) -> Result<f64> {
        self.forward_loss(batch, loss, true)
    }

    /// Backward of the last forward. Micro-step `micro` of the step; the `last` one launches
    /// every bucket's all-reduce as backward completes it, earlier ones only accumulate.
    fn backward(&mut self, micro: usize, last: bool) -> Result<()>;

    /// Waits for each bucket and updates its parameters; the step is complete on return.
    /// `meanwhile` runs once, when the step's work is queued and before the host waits for
    /// it: host work there (the trainer fills the next batch) overlaps the device's.
    fn step(&mut self, meanwhile: &mut dyn FnMut()) -> Result<()>;

    /// The global gradient norm of the last step, before clipping, when the run clips.
    fn grad_norm(&mut self) -> Option<f32>;

    /// The parameters and optimizer state as they are now, on the host (for a checkpoint).
    fn host_state(&mut self) -> Result<(&M, &ChosenOptimizer)>;

    /// The gradient buckets between steps, for what they carry from step to step (PowerSGD's
    /// state); none where the buckets live elsewhere (the GPU, which has no PowerSGD).
    fn buckets(&self) -> Vec<&GradBucket> {
        Vec::new()
    }

    fn buckets_mut(&mut self) -> Vec<&mut GradBucket> {
        Vec::new()
    }

    /// After the last step: the host model holds the final parameters.
    fn finish(&mut self) -> Result<()>;

    /// `GPU 0 (NVIDIA H200, sm_90)`, for the start-up line; the CPU says nothing.
    fn describe(&self) -> Option<String> {
        None
    }
}

/// The CPU: the macro's forward, backward and step on this process, all-reduces on the
/// communication thread.
pub(crate) struct CpuBackend<'a, M: DistributedModel> {
    model: &'a mut M,
    optimizer: ChosenOptimizer,
    comm: &'a Communicator,
    schedule: Schedule,
    /// The buckets between steps (`None` while in flight).
    grads: Option<M::Grads>,
    in_flight: Option<M::InFlight>,
    ws: M::Workspace,
    grad_output: Matrix,
    step: u64,
}

impl<'a, M: DistributedModel> CpuBackend<'a, M> {
    pub(crate) fn new(model: &'a mut M, optimizer: ChosenOptimizer, comm: &'a Communicator) -> Self {
        let grads = Some(model.new_grads());
        CpuBackend {
            model,
            optimizer,
            comm,
            schedule: M::SCHEDULE,
            grads,
            in_flight: None,
            ws: M::Workspace::default(),
            grad_output: Matrix::default(),
            step: 0,
        }
    }
}

impl<M: DistributedModel> StepBackend<M> for CpuBackend<'_, M> {
    fn begin_step(&mut self, step: u64) -> Result<()> {
        self.step = step;
        if self.grads.is_none() {
            // A failed step lost its buckets with its error; start the next one whole.
            self.in_flight = None;
            self.grads = Some(self.model.new_grads());
        }
        Ok(())
    }

    fn set_lr(&mut self, lr: f64) {
        self.optimizer.set_lr(lr);
    }

    fn forward_loss(&mut self, batch: &Batch, loss: &dyn Loss, _want_loss: bool) -> Result<f64> {
        if let Some(DeviceOp::Embedding { vocab, .. }) = M::DEVICE_OPS.first() {
            check_token_ids(&batch.inputs, *vocab)?;
        }
        let output = self.model.forward_gathering(&batch.context, &batch.inputs, &mut self.ws, self.comm)?;
        let shape = (output.rows(), output.cols());
        let span = trace::loss();
        let value = loss.loss_and_gradient(output, batch, &mut self.grad_output)?;
        drop(span);
        if (self.grad_output.rows(), self.grad_output.cols()) != shape {
            // Backward reads it as the output's gradient: another shape is the loss's mistake.
            return Err(Error::Loss(format!(
                "the loss's gradient is {}x{}, the model's output {}x{}: `Loss::loss_and_gradient` must give one \
                 value per output",
                self.grad_output.rows(),
                self.grad_output.cols(),
                shape.0,
                shape.1
            )));
        }
        // A finite loss with a non-finite gradient (a loss of one's own) would train every
        // parameter to NaN without a word: refused at the step it happens. With `check_finite`
        // the wait points find it, named by parameter, as any non-finite gradient; a non-finite
        // loss is reported as one, with what may have caused it.
        let unchecked = !self.comm.checks_finite() && value.is_finite();
        let non_finite = || self.grad_output.as_slice().iter().position(|g| !g.is_finite());
        if let Some(at) = unchecked.then(non_finite).flatten() {
            let cols = shape.1.max(1);
            return Err(Error::Loss(format!(
                "the loss's gradient is {} at row {}, column {} (the loss is {value}) at step {}: \
                 `Loss::loss_and_gradient` must give a finite gradient",
                self.grad_output.as_slice()[at],
                at / cols,
                at % cols,
                self.step + 1
            )));
        }
        if let Some(poison) = fault::poisoned_gradient(self.comm.rank(), self.step) {
            self.grad_output.as_mut_slice()[0] = poison;
        }
        Ok(f64::from(value))
    }

    fn backward(&mut self, _micro: usize, last: bool) -> Result<()> {
        let grads = self.grads.as_mut().ok_or_else(|| Error::Config("backward twice in one step".into()))?;
        if !last {
            self.model.backward_no_sync(&mut self.ws, &self.grad_output, grads);
            return Ok(());
        }
        let grads = self.grads.take().expect("checked above");
        let (model, ws, optimizer) = (&mut *self.model, &mut self.ws, &mut self.optimizer);
        self.in_flight = Some(model.backward(ws, &self.grad_output, grads, self.comm, optimizer));
        Ok(())
    }

    fn step(&mut self, meanwhile: &mut dyn FnMut()) -> Result<()> {
        let in_flight = self.in_flight.take().ok_or_else(|| Error::Config("a step without a backward".into()))?;
        // The last buckets' sums are in flight on the communication thread.
        meanwhile();
        let grads = self.model.step(in_flight, &mut self.optimizer);
        self.grads = Some(grads.map_err(|e| name_parameter(e, &self.schedule, self.step))?);
        Ok(())
    }

    fn grad_norm(&mut self) -> Option<f32> {
        self.optimizer.grad_clip().and_then(|clip| clip.last_norm())
    }

    fn host_state(&mut self) -> Result<(&M, &ChosenOptimizer)> {
        // Sharded parameters come back from their all-gathers first.
        self.comm.finish_gathers(self.model)?;
        Ok((self.model, &self.optimizer))
    }

    fn buckets(&self) -> Vec<&GradBucket> {
        self.grads.as_ref().map(GradientBuckets::buckets).unwrap_or_default()
    }

    fn buckets_mut(&mut self) -> Vec<&mut GradBucket> {
        self.grads.as_mut().map(GradientBuckets::buckets_mut).unwrap_or_default()
    }

    fn finish(&mut self) -> Result<()> {
        self.comm.finish_gathers(self.model)
    }
}

/// A non-finite gradient (or one that overflowed its wire format) found at a wait point, named
/// by parameter and step.
fn name_parameter(e: Error, schedule: &Schedule, step: u64) -> Error {
    let (Error::NonFiniteGradient { bucket, offset, .. } | Error::WireOverflow { bucket, offset, .. }) = e else {
        return e;
    };
    let found = schedule.buckets.get(bucket).and_then(|b| {
        b.params.iter().find_map(|&p| {
            let info = schedule.param(p);
            (info.offset..info.offset + info.numel())
                .contains(&offset)
                .then(|| (schedule.param_name(p), offset - info.offset))
        })
    });
    let Some((param, element)) = found else { return e };
    let step = step + 1;
    match e {
        Error::WireOverflow { format, value, .. } => Error::ParameterOverflow { param, element, step, format, value },
        Error::NonFiniteGradient { value, .. } => Error::NonFiniteParameter { param, element, step, value },
        other => other,
    }
}
