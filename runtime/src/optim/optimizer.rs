//! The contract between a model's step and an optimizer: parameters addressed by their index in
//! definition order, updated one by one after the wait point, or lent with their state to the
//! all-reduce when the update is element-wise.

use super::clip::GradClip;
use super::elementwise::LentState;

/// Panics unless `value` is finite and not negative, as `torch.optim` refuses such a setting
/// when the optimizer is made (`OptimizerConfig` checks its own before building one).
pub(super) fn assert_non_negative(optimizer: &str, setting: &str, value: f64) {
    assert!(value.is_finite() && value >= 0.0, "{optimizer}: {setting} {value}: must be finite and not negative");
}

/// An optimizer over the parameters of one model, addressed by their index in definition order.
pub trait Optimizer {
    /// Called once per step before the first `update` (advances step counters).
    fn begin_step(&mut self);

    /// Updates parameter `index` in place from its summed gradient. The gradient is multiplied
    /// by `grad_scale` (1 / (world size x micro-steps)) as it is read, so averaging costs no
    /// extra pass over the buckets.
    fn update(&mut self, index: usize, value: &mut [f32], grad: &[f32], grad_scale: f32);

    /// Lends parameter `index`'s state (of `len` values) with this step's rule, when the update
    /// is element-wise, so that it can run as its bucket is summed (on the communication
    /// thread) instead of after the wait point. The default lends nothing: `update` runs.
    fn lend(&mut self, index: usize, len: usize) -> Option<LentState> {
        let _ = (index, len);
        None
    }

    /// Takes back what `lend` lent, after the update ran.
    fn give_back(&mut self, index: usize, state: LentState) {
        let _ = (index, state);
    }

    /// Clipping by the global gradient norm, when the run clips (see `GradClip`): the step then
    /// lends nothing, waits for every bucket, and updates with the clipped scale. None by default.
    fn grad_clip(&mut self) -> Option<&mut GradClip> {
        None
    }
}
