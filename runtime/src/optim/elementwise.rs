//! Element-wise update rules (the coefficients of one SGD or AdamW step), and the parameter state
//! an optimizer lends with one.
//!
//! SGD and AdamW update every value from its own gradient and state alone, so the update of a
//! bucket can run on the communication thread, one part at a time, as soon as that part's sum is
//! known and while it is still in cache (`comm::lent`). `Sgd::update` and `AdamW::update` lend
//! to themselves and run the same kernels, so a step gives the same floats wherever its update
//! ran.

/// SGD's hyperparameters, as one update (and the GPU kernel) uses them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdRule {
    pub lr: f32,
    pub momentum: f32,
    pub dampening: f32,
    pub weight_decay: f32,
    pub nesterov: bool,
}

/// Everything one AdamW update needs, for the step begun last (also what the GPU kernel takes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// `lr / (1 - beta1^t)`.
    pub step_size: f32,
    /// `sqrt(1 - beta2^t)`.
    pub bias_correction2_sqrt: f32,
}

/// One step's rule for one parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ElementwiseRule {
    /// SGD; `first` on the parameter's first step, when the momentum buffer starts as the
    /// gradient (PyTorch's rule).
    Sgd {
        rule: SgdRule,
        first: bool,
    },
    AdamW(AdamWStep),
}

/// What an optimizer lends for one parameter's update: the rule and the state buffers, taken out
/// of the optimizer until they are given back (SGD: the momentum buffer, or none without
/// momentum; AdamW: both moments). Unused buffers are empty.
#[derive(Debug)]
pub struct LentState {
    pub rule: ElementwiseRule,
    pub buffers: [Vec<f32>; 2],
}

impl LentState {
    /// Applies the rule to elements `range` of the parameter, whose values are `value` and whose
    /// summed gradients are `grad`.
    pub fn apply(&mut self, range: std::ops::Range<usize>, value: &mut [f32], grad: &[f32], grad_scale: f32) {
        let [a, b] = &mut self.buffers;
        self.rule.apply(value, grad, grad_scale, [part(a, &range), part(b, &range)]);
    }
}

impl ElementwiseRule {
    /// Updates `value` from its summed gradient `grad` (scaled by `grad_scale` as it is read)
    /// and its state `buffers`, which are the same elements of the lent buffers.
    pub fn apply(&self, value: &mut [f32], grad: &[f32], grad_scale: f32, buffers: [&mut [f32]; 2]) {
        match *self {
            ElementwiseRule::Sgd { rule, first } => {
                let [momentum_buffer, _] = buffers;
                sgd(rule, first, value, grad, grad_scale, momentum_buffer)
            }
            ElementwiseRule::AdamW(step) => {
                let [m, v] = buffers;
                adamw(step, value, grad, grad_scale, m, v)
            }
        }
    }
}

/// Elements `range` of a state buffer, or nothing when the rule does not use it (empty).
fn part<'a>(buffer: &'a mut [f32], range: &std::ops::Range<usize>) -> &'a mut [f32] {
    if buffer.is_empty() {
        buffer
    } else {
        &mut buffer[range.clone()]
    }
}

/// PyTorch's SGD on a run of values; `buffer` is empty without momentum.
fn sgd(rule: SgdRule, first: bool, value: &mut [f32], grad: &[f32], grad_scale: f32, buffer: &mut [f32]) {
    let SgdRule { lr, momentum, dampening, weight_decay, nesterov } = rule;
    if momentum == 0.0 {
        for (p, &g) in value.iter_mut().zip(grad) {
            *p -= lr * (g * grad_scale + weight_decay * *p);
        }
        return;
    }
    for ((p, &g), b) in value.iter_mut().zip(grad).zip(buffer.iter_mut()) {
        let g = g * grad_scale + weight_decay * *p;
        *b = if first { g } else { momentum * *b + (1.0 - dampening) * g };
        let step = if nesterov { g + momentum * *b } else { *b };
        *p -= lr * step;
    }
}

/// PyTorch's AdamW on a run of values.
fn adamw(step: AdamWStep, value: &mut [f32], grad: &[f32], grad_scale: f32, m: &mut [f32], v: &mut [f32]) {
    let AdamWStep { lr, beta1: b1, beta2: b2, eps, weight_decay, step_size, bias_correction2_sqrt } = step;
    let decay = 1.0 - lr * weight_decay;
    for (((p, &g), m), v) in value.iter_mut().zip(grad).zip(m.iter_mut()).zip(v.iter_mut()) {
        let g = g * grad_scale;
        *p *= decay;
        *m = b1 * *m + (1.0 - b1) * g;
        *v = b2 * *v + (1.0 - b2) * g * g;
        let denom = v.sqrt() / bias_correction2_sqrt + eps;
        *p -= step_size * *m / denom;
    }
}
