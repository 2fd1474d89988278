//! The optimizers' kernels: SGD's and AdamW's updates, and the squares a global norm sums.

use crate::arguments::{holds, int};
use crate::ffi;
use crate::launch_shapes::Shape;
use overlap_runtime::optim::{AdamWStep, SgdRule};

/// One SGD update of `value` from `grad`, as `cuda::sgd_update` launches it.
pub fn sgd_update(
    shape: Shape,
    rule: SgdRule,
    (value, momentum_buffer): (&mut [f32], &mut [f32]),
    grad: &[f32],
    first: bool,
    grad_scale: f32,
) {
    let n = value.len();
    holds(momentum_buffer, n, "momentum buffer");
    holds(grad, n, "grad");
    // SAFETY: touches n elements of each, which all hold.
    unsafe {
        ffi::emu_sgd_update(
            shape.grid,
            shape.block,
            value.as_mut_ptr(),
            momentum_buffer.as_mut_ptr(),
            grad.as_ptr(),
            int(n),
            rule.lr,
            rule.momentum,
            rule.kept,
            rule.weight_decay,
            i32::from(rule.nesterov),
            i32::from(first),
            grad_scale,
        )
    }
}

/// One AdamW update, with the step's coefficients as `cuda::adamw_update` passes them
/// (the reciprocal of the bias correction taken in f32, as PyTorch's CUDA division does).
pub fn adamw_update(
    shape: Shape,
    step: AdamWStep,
    (value, exp_avg, exp_avg_sq): (&mut [f32], &mut [f32], &mut [f32]),
    grad: &[f32],
    grad_scale: f32,
) {
    let n = value.len();
    holds(exp_avg, n, "exp_avg");
    holds(exp_avg_sq, n, "exp_avg_sq");
    holds(grad, n, "grad");
    let inv_bias_correction2_sqrt = 1.0 / step.bias_correction2_sqrt;
    // SAFETY: touches n elements of each, which all hold.
    unsafe {
        ffi::emu_adamw_update(
            shape.grid,
            shape.block,
            value.as_mut_ptr(),
            exp_avg.as_mut_ptr(),
            exp_avg_sq.as_mut_ptr(),
            grad.as_ptr(),
            int(n),
            step.decay,
            step.lerp_weight,
            step.beta2,
            step.one_minus_beta2,
            inv_bias_correction2_sqrt,
            step.eps,
            step.neg_step_size,
            grad_scale,
        )
    }
}

/// The squares of `x` summed in f64 into one partial sum per block.
pub fn sum_squares(shape: Shape, x: &[f32], partials: &mut [f64]) {
    assert_eq!(shape.block, 256, "sum_squares' shared array holds 256 threads' sums");
    holds(partials, shape.grid as usize, "partials");
    // SAFETY: reads n elements of x and writes one partial per block, which partials holds.
    unsafe { ffi::emu_sum_squares(shape.grid, shape.block, x.as_ptr(), int(x.len()), partials.as_mut_ptr()) }
}
