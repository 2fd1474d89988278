//! What a checkpoint must carry of an optimizer, under the names PyTorch's optimizer
//! `state_dict` uses (`momentum_buffer`; `exp_avg`, `exp_avg_sq`, `step`).

use super::adamw::AdamW;
use super::sgd::Sgd;

/// An optimizer's state as a checkpoint saves and restores it, per parameter by index.
pub trait OptimizerState {
    /// `sgd` or `adamw`: a checkpoint of one cannot resume the other.
    fn kind(&self) -> &'static str;
    /// Names of the per-parameter buffers, in the order `buffers` and `set_buffers` use.
    fn buffer_names(&self) -> &'static [&'static str];
    /// The buffers of parameter `index`, or `None` before its first update.
    fn buffers(&self, index: usize) -> Option<Vec<&[f32]>>;
    /// Restores the buffers of parameter `index`, one per name of `buffer_names`.
    fn set_buffers(&mut self, index: usize, buffers: &[&[f32]]);
    /// Steps taken, where the update rule depends on it (AdamW's bias correction).
    fn step_count(&self) -> Option<u64>;
    /// Restores the count of steps taken from a checkpoint; SGD, which has none, ignores it.
    fn set_step_count(&mut self, step: u64);
}

impl OptimizerState for Sgd {
    fn kind(&self) -> &'static str {
        "sgd"
    }
    fn buffer_names(&self) -> &'static [&'static str] {
        &["momentum_buffer"]
    }
    fn buffers(&self, index: usize) -> Option<Vec<&[f32]>> {
        self.momentum_buffer(index).map(|b| vec![b])
    }
    fn set_buffers(&mut self, index: usize, buffers: &[&[f32]]) {
        self.set_momentum_buffer(index, buffers[0]);
    }
    fn step_count(&self) -> Option<u64> {
        None
    }
    fn set_step_count(&mut self, _: u64) {}
}

impl OptimizerState for AdamW {
    fn kind(&self) -> &'static str {
        "adamw"
    }
    fn buffer_names(&self) -> &'static [&'static str] {
        &["exp_avg", "exp_avg_sq"]
    }
    fn buffers(&self, index: usize) -> Option<Vec<&[f32]>> {
        Some(vec![self.exp_avg(index)?, self.exp_avg_sq(index)?])
    }
    fn set_buffers(&mut self, index: usize, buffers: &[&[f32]]) {
        self.set_state(index, buffers[0], buffers[1]);
    }
    fn step_count(&self) -> Option<u64> {
        Some(AdamW::step_count(self))
    }
    fn set_step_count(&mut self, step: u64) {
        AdamW::set_step_count(self, step);
    }
}
