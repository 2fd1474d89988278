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
    /// The step's learning rate (the schedule's, for this step).
    pub lr: f32,
    /// The momentum buffer's decay; 0: no buffer, plain SGD.
    pub momentum: f32,
    /// How much of each gradient the momentum buffer takes in, `1 - dampening`: taken in f64 and
    /// rounded to f32 once, as PyTorch's `alpha=1 - dampening` is.
    pub kept: f32,
    /// L2 penalty added to the gradient (`g + weight_decay·p`, PyTorch's coupled decay); 0 for
    /// a parameter exempt from decay.
    pub weight_decay: f32,
    /// Step along `g + momentum·buffer` instead of the buffer (Nesterov momentum).
    pub nesterov: bool,
}

/// One step's coefficients, each the f32 that PyTorch's single-tensor AdamW
/// (`foreach=False`) hands its tensor op: a Python float, computed in f64 from the f64
/// hyperparameters, and rounded to the tensor's f32 once, at the op that takes it. The CPU rule
/// and the GPU kernel take the same values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    /// `1 - lr·weight_decay`: `param.mul_(·)`, the decoupled decay.
    pub decay: f32,
    /// `1 - beta1`: `exp_avg.lerp_(grad, ·)`.
    pub lerp_weight: f32,
    /// `exp_avg_sq.mul_(beta2)`.
    pub beta2: f32,
    /// `1 - beta2`: `exp_avg_sq.addcmul_(grad, grad, value=·)`.
    pub one_minus_beta2: f32,
    /// `sqrt(1 - beta2^t)`: `exp_avg_sq.sqrt() / ·`.
    pub bias_correction2_sqrt: f32,
    /// `.add_(eps)`.
    pub eps: f32,
    /// `-lr / (1 - beta1^t)`: `param.addcdiv_(exp_avg, denom, value=·)`.
    pub neg_step_size: f32,
}

/// One step's rule for one parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ElementwiseRule {
    /// SGD; `first` on the parameter's first step, when the momentum buffer starts as the
    /// gradient (PyTorch's rule).
    Sgd {
        /// The hyperparameters, decay as the parameter takes it.
        rule: SgdRule,
        /// Whether the parameter has no momentum buffer yet: it starts as the gradient, undamped.
        first: bool,
    },
    /// AdamW, with this step's coefficients.
    AdamW(AdamWStep),
}

/// What an optimizer lends for one parameter's update: the rule and the state buffers, taken out
/// of the optimizer until they are given back (SGD: the momentum buffer, or none without
/// momentum; AdamW: both moments). Unused buffers are empty.
#[derive(Debug)]
pub struct LentState {
    /// This step's rule for the parameter.
    pub rule: ElementwiseRule,
    /// The state buffers, each as long as the parameter or empty: SGD's momentum buffer then an
    /// empty one; AdamW's first then second moment (`exp_avg`, `exp_avg_sq`).
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

/// PyTorch's SGD on a run of values; `buffer` is empty without momentum. Op by op, each op's
/// result an f32, rounded as PyTorch's CPU kernels round it on x86-64 with AVX2 or AVX-512 (an
/// `add` with `alpha` is one fused multiply-add there); `runtime/tests/sgd_pytorch.rs` holds it
/// to PyTorch's own results:
/// ```text
/// grad = grad.add(param, alpha=weight_decay)                fma(p, weight_decay, g), when decaying
/// buf.mul_(momentum).add_(grad, alpha=1 - dampening)        fma(g, kept, b * momentum)
/// grad = grad.add(buf, alpha=momentum)                      fma(b, momentum, g), Nesterov's
/// param.add_(grad, alpha=-lr)                               fma(g, -lr, p)
/// ```
/// The gradient is scaled first (`g * grad_scale`, the mean over ranks and micro-steps): as DDP's
/// division by the world size on one rank and on a power of two of them; on others `x·(1/n)` may
/// round otherwise than `x/n`.
fn sgd(rule: SgdRule, first: bool, value: &mut [f32], grad: &[f32], grad_scale: f32, buffer: &mut [f32]) {
    let SgdRule { lr, momentum, kept, weight_decay, nesterov } = rule;
    let decayed = |g: f32, p: f32| if weight_decay == 0.0 { g } else { p.mul_add(weight_decay, g) };
    if momentum == 0.0 {
        for (p, &g) in value.iter_mut().zip(grad) {
            *p = decayed(g * grad_scale, *p).mul_add(-lr, *p);
        }
        return;
    }
    for ((p, &g), b) in value.iter_mut().zip(grad).zip(buffer.iter_mut()) {
        let g = decayed(g * grad_scale, *p);
        *b = if first { g } else { g.mul_add(kept, *b * momentum) };
        let step = if nesterov { b.mul_add(momentum, g) } else { *b };
        *p = step.mul_add(-lr, *p);
    }
}

/// PyTorch's single-tensor AdamW on a run of values, op by op, each op's result an f32, rounded
/// as PyTorch's CPU kernels round it on x86-64 with AVX2 or AVX-512 (what it picks on any such
/// CPU; its generic kernels, without fused multiply-adds, differ by an ulp):
/// ```text
/// param.mul_(1 - lr * weight_decay)                                p * decay
/// exp_avg.lerp_(grad, 1 - beta1)                                   fma from the nearer end
/// exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)     fma((1 - beta2) * g, g, v * beta2)
/// denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)    a true division
/// param.addcdiv_(exp_avg, denom, value=-step_size)                 p + (-step_size * m) / denom
/// ```
/// The root is the correctly rounded one, as PyTorch's own vector kernels and CUDA take it; its
/// x86-64 wheels take MKL's, which is the other neighbour for about one value in six.
/// `runtime/tests/adamw_pytorch.rs` holds this to PyTorch's own results.
fn adamw(step: AdamWStep, value: &mut [f32], grad: &[f32], grad_scale: f32, m: &mut [f32], v: &mut [f32]) {
    let AdamWStep { decay, lerp_weight, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size } = step;
    for (((p, &g), m), v) in value.iter_mut().zip(grad).zip(m.iter_mut()).zip(v.iter_mut()) {
        let g = g * grad_scale;
        *m = lerp(*m, g, lerp_weight);
        *v = (one_minus_beta2 * g).mul_add(g, *v * beta2);
        let denom = v.sqrt() / bias_correction2_sqrt + eps;
        *p = *p * decay + neg_step_size * *m / denom;
    }
}

/// `torch.lerp` with a scalar weight: one fused multiply-add from whichever end is nearer, so
/// that the result is exact at both ends (PyTorch's vector kernel, and its CUDA one).
#[inline(always)]
fn lerp(start: f32, end: f32, weight: f32) -> f32 {
    if weight.abs() < 0.5 {
        weight.mul_add(end - start, start)
    } else {
        (weight - 1.0).mul_add(end - start, end)
    }
}
