//! Optimizer state on the GPU and the fused update of one parameter. The hyperparameters and
//! the step count come from the CPU optimizers (`Sgd`, `AdamW`), so both backends follow one
//! definition of PyTorch's rules.

use cudarc::driver::CudaSlice;

use super::gpu::{cuda, Gpu};
use super::ops;
use crate::error::Result;
use crate::optim::{AdamW, Optimizer, Sgd};

pub enum GpuOptimizer {
    Sgd(Sgd),
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
        let count = match self {
            // The kernel never touches the buffer without momentum; one element stands in for it.
            GpuOptimizer::Sgd(sgd) if sgd.rule().momentum == 0.0 => return zeros(gpu, &[1]),
            GpuOptimizer::Sgd(_) => 1,
            GpuOptimizer::AdamW(_) => 2,
        };
        zeros(gpu, &vec![numel; count])
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
        value: &mut CudaSlice<f32>,
        state: &mut ParamState,
        grad: cudarc::driver::CudaView<f32>,
        grad_scale: f32,
    ) -> Result<()> {
        let first = !state.updated;
        state.updated = true;
        match (self, state.buffers.as_mut_slice()) {
            (GpuOptimizer::Sgd(sgd), [momentum]) => ops::sgd_update(
                gpu,
                sgd.rule(),
                &mut value.as_view_mut(),
                &mut momentum.as_view_mut(),
                grad,
                first,
                grad_scale,
            ),
            (GpuOptimizer::AdamW(adamw), [m, v]) => ops::adamw_update(
                gpu,
                adamw.current_step(),
                &mut value.as_view_mut(),
                (&mut m.as_view_mut(), &mut v.as_view_mut()),
                grad,
                grad_scale,
            ),
            _ => unreachable!("the state was made by new_state for this optimizer"),
        }
    }
}

fn zeros(gpu: &Gpu, lengths: &[usize]) -> Result<ParamState> {
    let buffers = lengths.iter().map(|&n| gpu.compute().alloc_zeros::<f32>(n)).collect::<std::result::Result<_, _>>();
    Ok(ParamState { buffers: buffers.map_err(cuda("allocating optimizer state"))?, updated: false })
}
