//! Optimizers with PyTorch's update rules. An element-wise one lends each parameter's state as
//! its bucket is launched and the update runs as the bucket is summed; any other gets `update`
//! once per parameter, bucket by bucket, right after that bucket's wait point.

mod adamw;
mod chosen;
mod clip;
mod elementwise;
mod optimizer;
mod schedule;
mod sgd;
mod state;

pub use adamw::AdamW;
pub use chosen::ChosenOptimizer;
pub use clip::{sum_of_squares, GradClip};
pub use elementwise::{AdamWStep, ElementwiseRule, LentState, SgdRule};
pub use optimizer::Optimizer;
pub use schedule::{DecayOn, LrSchedule};
pub use sgd::Sgd;
pub use state::OptimizerState;

#[cfg(test)]
mod tests;
