//! Optimizers with PyTorch's update rules. The model's `step` calls `update` once per parameter,
//! bucket by bucket, right after that bucket's wait point.

mod adamw;
mod chosen;
mod sgd;
mod state;

pub use adamw::{AdamW, AdamWStep};
pub use chosen::ChosenOptimizer;
pub use sgd::{Sgd, SgdRule};
pub use state::OptimizerState;

/// An optimizer over the parameters of one model, addressed by their index in definition order.
pub trait Optimizer {
    /// Called once per step before the first `update` (advances step counters).
    fn begin_step(&mut self);

    /// Updates parameter `index` in place from its summed gradient. The gradient is multiplied
    /// by `grad_scale` (1 / (world size x micro-steps)) as it is read, so averaging costs no
    /// extra pass over the buckets.
    fn update(&mut self, index: usize, value: &mut [f32], grad: &[f32], grad_scale: f32);
}
