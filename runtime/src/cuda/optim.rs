//! Optimizer state on the GPU and the fused update of one parameter. The hyperparameters and
//! the step count come from the CPU optimizers (`Sgd`, `AdamW`), so both backends follow one
//! definition of PyTorch's rules.

use cudarc::driver::{CudaSlice, CudaViewMut, PushKernelArg};
use overlap_plan::Schedule;

use super::gpu::{cuda, Gpu};
use super::ops::{elementwise, int, launch, In, Out};
use crate::error::{Error, Result};
use crate::optim::{AdamW, AdamWStep, ChosenOptimizer, GradClip, Optimizer, OptimizerState, Sgd, SgdRule};

/// The optimizer whose rule the GPU's updates follow: the CPU's, for its hyperparameters, learning
/// rate and step count (the buffers are `ParamState`s on the GPU).
pub enum GpuOptimizer {
    /// PyTorch's SGD (momentum, dampening, Nesterov and decay as set).
    Sgd(Sgd),
    /// AdamW (PyTorch's rule).
    AdamW(AdamW),
}

/// One parameter's optimizer buffers, shaped like it.
pub struct ParamState {
    /// SGD: the momentum buffer; AdamW: the first and second moments.
    buffers: Vec<CudaSlice<f32>>,
    /// Updated at least once (PyTorch starts SGD's momentum buffer with the first gradient).
    updated: bool,
}

impl GpuOptimizer {
    /// Zeroed state for a parameter of `numel` elements.
    pub fn new_state(&self, gpu: &Gpu, numel: usize) -> Result<ParamState> {
        if numel == 0 {
            // A parameter this rank owns none of (sharded state): never updated here.
            return Ok(ParamState { buffers: Vec::new(), updated: false });
        }
        let count = match self {
            // The kernel never touches the buffer without momentum; one element stands in for it.
            GpuOptimizer::Sgd(sgd) if sgd.rule().momentum == 0.0 => return zeros(gpu, &[1]),
            GpuOptimizer::Sgd(_) => 1,
            GpuOptimizer::AdamW(_) => 2,
        };
        zeros(gpu, &vec![numel; count])
    }

    /// The optimizer `chosen` describes, with its step count but none of its buffers (those go
    /// to the device with `ParamState::upload`).
    pub fn like(chosen: &ChosenOptimizer, config: &crate::config::OptimizerConfig, schedule: &Schedule) -> Self {
        let mut fresh = config.build(schedule);
        if let Some(step) = chosen.step_count() {
            fresh.set_step_count(step);
        }
        match fresh {
            ChosenOptimizer::Sgd(o) => GpuOptimizer::Sgd(o),
            ChosenOptimizer::AdamW(o) => GpuOptimizer::AdamW(o),
        }
    }

    /// Steps taken, where the rule depends on it (AdamW).
    pub fn step_count(&self) -> Option<u64> {
        match self {
            GpuOptimizer::Sgd(o) => OptimizerState::step_count(o),
            GpuOptimizer::AdamW(o) => OptimizerState::step_count(o),
        }
    }

    /// Whether parameters carry buffers at all (SGD without momentum does not).
    pub(super) fn keeps_buffers(&self) -> bool {
        !matches!(self, GpuOptimizer::Sgd(sgd) if sgd.rule().momentum == 0.0)
    }

    /// The learning rate of the updates from now on.
    pub fn set_lr(&mut self, lr: f64) {
        match self {
            GpuOptimizer::Sgd(o) => o.set_lr(lr as f32),
            GpuOptimizer::AdamW(o) => o.set_lr(lr),
        }
    }

    /// Clipping by the global gradient norm, when the run clips.
    pub fn grad_clip(&mut self) -> Option<&mut GradClip> {
        match self {
            GpuOptimizer::Sgd(o) => o.grad_clip(),
            GpuOptimizer::AdamW(o) => o.grad_clip(),
        }
    }

    /// Called once per step before the first update (AdamW's step count).
    pub fn begin_step(&mut self) {
        match self {
            GpuOptimizer::Sgd(o) => o.begin_step(),
            GpuOptimizer::AdamW(o) => o.begin_step(),
        }
    }

    /// Queues the update of `value` from its summed gradient on the compute stream.
    pub fn update(
        &self,
        gpu: &Gpu,
        index: usize,
        value: &mut CudaViewMut<f32>,
        state: &mut ParamState,
        grad: cudarc::driver::CudaView<f32>,
        grad_scale: f32,
    ) -> Result<()> {
        let first = !state.updated;
        state.updated = true;
        match (self, state.buffers.as_mut_slice()) {
            (GpuOptimizer::Sgd(sgd), [momentum]) => {
                sgd_update(gpu, sgd.rule_for(index), value, &mut momentum.as_view_mut(), grad, first, grad_scale)
            }
            (GpuOptimizer::AdamW(adamw), [m, v]) => adamw_update(
                gpu,
                adamw.step_for(index),
                value,
                (&mut m.as_view_mut(), &mut v.as_view_mut()),
                grad,
                grad_scale,
            ),
            _ => unreachable!("the state was made by new_state for this optimizer"),
        }
    }
}

impl ParamState {
    /// This parameter's buffers copied out, or `None` before its first update (or without
    /// buffers), as a checkpoint stores them.
    pub fn download(&self, gpu: &Gpu, optimizer: &GpuOptimizer) -> Result<Option<Vec<Vec<f32>>>> {
        if !self.updated || !optimizer.keeps_buffers() {
            return Ok(None);
        }
        let stream = gpu.compute();
        let host = self.buffers.iter().map(|b| stream.clone_dtoh(b)).collect::<std::result::Result<_, _>>();
        Ok(Some(host.map_err(cuda("copying optimizer state out"))?))
    }

    /// Restores this parameter's buffers from a checkpoint (shapes already checked by the loader).
    pub fn upload(&mut self, gpu: &Gpu, buffers: &[&[f32]]) -> Result<()> {
        let lengths = |device: &[CudaSlice<f32>]| device.iter().map(CudaSlice::len).collect::<Vec<_>>();
        let given: Vec<usize> = buffers.iter().map(|b| b.len()).collect();
        if self.buffers.is_empty() && given.iter().all(|&n| n == 0) {
            return Ok(()); // owns none of the parameter (sharded state): nothing to keep
        }
        if lengths(&self.buffers) != given {
            return Err(Error::Cuda(format!(
                "optimizer state of {given:?} values for buffers of {:?} on the GPU (a bug: the loader checks shapes)",
                lengths(&self.buffers)
            )));
        }
        for (device, host) in self.buffers.iter_mut().zip(buffers) {
            gpu.compute().memcpy_htod(*host, device).map_err(cuda("copying optimizer state in"))?;
        }
        self.updated = true;
        Ok(())
    }
}

fn zeros(gpu: &Gpu, lengths: &[usize]) -> Result<ParamState> {
    let buffers = lengths.iter().map(|&n| gpu.compute().alloc_zeros::<f32>(n)).collect::<std::result::Result<_, _>>();
    Ok(ParamState { buffers: buffers.map_err(cuda("allocating optimizer state"))?, updated: false })
}

/// One SGD update of a parameter from its summed gradient, scaled by `grad_scale` as it is read.
/// `first` marks the parameter's first update (PyTorch starts the momentum buffer there).
pub fn sgd_update(
    gpu: &Gpu,
    rule: SgdRule,
    value: Out,
    momentum_buffer: Out,
    grad: In,
    first: bool,
    grad_scale: f32,
) -> Result<()> {
    let n = value.len();
    let (n_, nesterov, first) = (int(n), i32::from(rule.nesterov), i32::from(first));
    let mut args = gpu.compute().launch_builder(gpu.kernel("sgd_update"));
    args.arg(value).arg(momentum_buffer).arg(&grad).arg(&n_);
    args.arg(&rule.lr).arg(&rule.momentum).arg(&rule.kept).arg(&rule.weight_decay);
    args.arg(&nesterov).arg(&first).arg(&grad_scale);
    // SAFETY: value, momentum buffer and gradient all hold `n` elements (one parameter each).
    launch("sgd_update", unsafe { args.launch(elementwise(n)) })
}

/// One AdamW update of a parameter, with the coefficients of the current step.
pub fn adamw_update(
    gpu: &Gpu,
    step: AdamWStep,
    value: Out,
    (exp_avg, exp_avg_sq): (Out, Out),
    grad: In,
    grad_scale: f32,
) -> Result<()> {
    let n = value.len();
    let n_ = int(n);
    let mut args = gpu.compute().launch_builder(gpu.kernel("adamw_update"));
    args.arg(value).arg(exp_avg).arg(exp_avg_sq).arg(&grad).arg(&n_);
    // PyTorch's CUDA division by a CPU scalar multiplies by its reciprocal, taken in f32.
    let inv_bias_correction2_sqrt = 1.0 / step.bias_correction2_sqrt;
    args.arg(&step.decay).arg(&step.lerp_weight).arg(&step.beta2).arg(&step.one_minus_beta2);
    args.arg(&inv_bias_correction2_sqrt).arg(&step.eps).arg(&step.neg_step_size).arg(&grad_scale);
    // SAFETY: value, both moments and the gradient all hold `n` elements (one parameter each).
    launch("adamw_update", unsafe { args.launch(elementwise(n)) })
}
