//! The optimizer a run's `OptimizerConfig` chose, behind one type that both backends and
//! checkpoints use.

use super::adamw::AdamW;
use super::clip::GradClip;
use super::elementwise::LentState;
use super::optimizer::Optimizer;
use super::sgd::Sgd;
use super::state::OptimizerState;

/// The optimizer a run's `OptimizerConfig` chose (see `OptimizerConfig::build`).
pub enum ChosenOptimizer {
    /// `OptimizerKind::Sgd`: PyTorch's SGD, with momentum, dampening, Nesterov and decay as set.
    Sgd(Sgd),
    /// `OptimizerKind::AdamW`: PyTorch's single-tensor AdamW.
    AdamW(AdamW),
}

impl ChosenOptimizer {
    /// Parameter `index` is not decayed.
    pub fn exempt_from_decay(&mut self, index: usize) {
        match self {
            ChosenOptimizer::Sgd(o) => o.exempt_from_decay(index),
            ChosenOptimizer::AdamW(o) => o.exempt_from_decay(index),
        }
    }

    /// The learning rate of the steps from now on (an `LrSchedule` sets it before each step).
    pub fn set_lr(&mut self, lr: f64) {
        match self {
            ChosenOptimizer::Sgd(o) => o.set_lr(lr as f32),
            ChosenOptimizer::AdamW(o) => o.set_lr(lr),
        }
    }
}

impl Optimizer for ChosenOptimizer {
    fn grad_clip(&mut self) -> Option<&mut GradClip> {
        match self {
            ChosenOptimizer::Sgd(o) => o.grad_clip(),
            ChosenOptimizer::AdamW(o) => o.grad_clip(),
        }
    }

    fn begin_step(&mut self) {
        match self {
            ChosenOptimizer::Sgd(o) => o.begin_step(),
            ChosenOptimizer::AdamW(o) => o.begin_step(),
        }
    }

    fn update(&mut self, index: usize, value: &mut [f32], grad: &[f32], grad_scale: f32) {
        match self {
            ChosenOptimizer::Sgd(o) => o.update(index, value, grad, grad_scale),
            ChosenOptimizer::AdamW(o) => o.update(index, value, grad, grad_scale),
        }
    }

    fn lend(&mut self, index: usize, len: usize) -> Option<LentState> {
        match self {
            ChosenOptimizer::Sgd(o) => o.lend(index, len),
            ChosenOptimizer::AdamW(o) => o.lend(index, len),
        }
    }

    fn give_back(&mut self, index: usize, state: LentState) {
        match self {
            ChosenOptimizer::Sgd(o) => o.give_back(index, state),
            ChosenOptimizer::AdamW(o) => o.give_back(index, state),
        }
    }
}

impl OptimizerState for ChosenOptimizer {
    fn kind(&self) -> &'static str {
        match self {
            ChosenOptimizer::Sgd(o) => o.kind(),
            ChosenOptimizer::AdamW(o) => o.kind(),
        }
    }
    fn buffer_names(&self) -> &'static [&'static str] {
        match self {
            ChosenOptimizer::Sgd(o) => o.buffer_names(),
            ChosenOptimizer::AdamW(o) => o.buffer_names(),
        }
    }
    fn buffers(&self, index: usize) -> Option<Vec<&[f32]>> {
        match self {
            ChosenOptimizer::Sgd(o) => o.buffers(index),
            ChosenOptimizer::AdamW(o) => o.buffers(index),
        }
    }
    fn set_buffers(&mut self, index: usize, buffers: &[&[f32]]) {
        match self {
            ChosenOptimizer::Sgd(o) => o.set_buffers(index, buffers),
            ChosenOptimizer::AdamW(o) => o.set_buffers(index, buffers),
        }
    }
    fn step_count(&self) -> Option<u64> {
        match self {
            ChosenOptimizer::Sgd(o) => OptimizerState::step_count(o),
            ChosenOptimizer::AdamW(o) => OptimizerState::step_count(o),
        }
    }
    fn set_step_count(&mut self, step: u64) {
        match self {
            ChosenOptimizer::Sgd(o) => OptimizerState::set_step_count(o, step),
            ChosenOptimizer::AdamW(o) => OptimizerState::set_step_count(o, step),
        }
    }
}
