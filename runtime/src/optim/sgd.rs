//! Stochastic gradient descent with PyTorch's `torch.optim.SGD` update rule.

use super::clip::GradClip;
use super::elementwise::{ElementwiseRule, LentState, SgdRule};
use super::optimizer::{assert_non_negative, Optimizer};
use super::schedule::DecayExemptions;

/// SGD with optional momentum, dampening, Nesterov momentum and (coupled) weight decay.
///
/// Its constructor and setters panic on what PyTorch's constructor refuses (negative `lr`,
/// `momentum` or `weight_decay`; Nesterov without `momentum > 0` and `dampening == 0`, at the
/// first step);
/// `OptimizerConfig`, from which the `Trainer` builds its optimizer, reports each as an error
/// before step 1 instead, and so does the command line.
#[derive(Clone, Debug)]
pub struct Sgd {
    lr: f32,
    momentum: f32,
    /// As given (in f64, as PyTorch takes a Python float): the update adds
    /// `(1 - dampening)·g`, that difference rounded to f32 once, as PyTorch rounds its `alpha`.
    dampening: f64,
    weight_decay: f32,
    /// Parameters exempt from weight decay (`exempt_from_decay`).
    exempt: DecayExemptions,
    /// Clipping by the global gradient norm, when set (`clip_grad_norm`).
    clip: Option<GradClip>,
    nesterov: bool,
    /// Momentum buffer per parameter index; empty until that parameter's first update, so a
    /// steady-state step never allocates, and while it is lent (`lend`).
    buffers: Vec<Vec<f32>>,
}

impl Sgd {
    /// Plain SGD (no momentum, dampening or weight decay) with learning rate `lr`.
    pub fn new(lr: f32) -> Self {
        assert_non_negative("Sgd", "learning rate", lr.into());
        Sgd {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            exempt: DecayExemptions::default(),
            clip: None,
            nesterov: false,
            buffers: Vec::new(),
        }
    }

    /// `torch.optim.SGD`'s `momentum` (0: none).
    pub fn momentum(mut self, momentum: f32) -> Self {
        assert_non_negative("Sgd", "momentum", momentum.into());
        self.momentum = momentum;
        self
    }

    /// Fraction of the gradient held back from the momentum buffer (not applied on the first
    /// step, as PyTorch). Taken as an f64, as PyTorch takes a Python float: the buffer adds
    /// `(1 - dampening)·g` with the difference taken in f64 and rounded to f32 once (from an f32
    /// such as `0.9f32`, whose f64 is not 0.9, the difference is another float).
    pub fn dampening(mut self, dampening: impl Into<f64>) -> Self {
        let dampening = dampening.into();
        assert!(dampening.is_finite(), "Sgd: dampening {dampening}: must be finite");
        self.dampening = dampening;
        self
    }

    /// L2 penalty added to the gradient (coupled, unlike [`AdamW`](crate::optim::AdamW)).
    pub fn weight_decay(mut self, weight_decay: f32) -> Self {
        assert_non_negative("Sgd", "weight decay", weight_decay.into());
        self.weight_decay = weight_decay;
        self
    }

    /// Clips the gradients to a global norm of `max_norm` before each update, as
    /// `torch.nn.utils.clip_grad_norm_(max_norm)` before `step()`.
    pub fn clip_grad_norm(mut self, max_norm: f32) -> Self {
        self.clip = Some(GradClip::new(max_norm));
        self
    }

    /// Nesterov momentum, as `torch.optim.SGD(nesterov=True)`, which needs momentum and no
    /// dampening (the first step panics otherwise, as PyTorch refuses it).
    pub fn nesterov(mut self, nesterov: bool) -> Self {
        self.nesterov = nesterov;
        self
    }

    /// The learning rate the next update uses.
    pub fn lr(&self) -> f32 {
        self.lr
    }

    /// Changes the learning rate from the next update on (for schedules).
    pub fn set_lr(&mut self, lr: f32) {
        assert_non_negative("Sgd", "learning rate", lr.into());
        self.lr = lr;
    }

    /// Momentum buffer of parameter `index`, or `None` before its first update (or when
    /// momentum is 0); for checkpointing.
    pub fn momentum_buffer(&self, index: usize) -> Option<&[f32]> {
        self.buffers.get(index).filter(|b| !b.is_empty()).map(Vec::as_slice)
    }

    /// Restores the momentum buffer of parameter `index` from a checkpoint.
    pub fn set_momentum_buffer(&mut self, index: usize, buffer: &[f32]) {
        crate::host::huge_pages::assign(self.slot(index), buffer);
    }

    fn slot(&mut self, index: usize) -> &mut Vec<f32> {
        if index >= self.buffers.len() {
            self.buffers.resize_with(index + 1, Vec::new);
        }
        &mut self.buffers[index]
    }
}

impl Sgd {
    /// Parameter `index` is not decayed (as a PyTorch parameter group with `weight_decay` 0).
    pub fn exempt_from_decay(&mut self, index: usize) {
        self.exempt.insert(index);
    }

    /// The rule of parameter `index`: `rule`, without decay where it is exempt.
    pub fn rule_for(&self, index: usize) -> SgdRule {
        let rule = self.rule();
        if self.exempt.contains(index) {
            SgdRule { weight_decay: 0.0, ..rule }
        } else {
            rule
        }
    }

    /// The hyperparameters as set, decay included: what every parameter's rule starts from.
    pub fn rule(&self) -> SgdRule {
        SgdRule {
            lr: self.lr,
            momentum: self.momentum,
            kept: (1.0 - self.dampening) as f32,
            weight_decay: self.weight_decay,
            nesterov: self.nesterov,
        }
    }
}

impl Optimizer for Sgd {
    fn grad_clip(&mut self) -> Option<&mut GradClip> {
        self.clip.as_mut()
    }

    /// SGD keeps no step counter: the first step is detected per parameter. Checks what the
    /// builder's calls could only make together: Nesterov momentum needs momentum, undamped.
    fn begin_step(&mut self) {
        assert!(
            !self.nesterov || (self.momentum > 0.0 && self.dampening == 0.0),
            "Sgd: Nesterov momentum requires a momentum and zero dampening (momentum {}, dampening {})",
            self.momentum,
            self.dampening
        );
    }

    fn update(&mut self, index: usize, value: &mut [f32], grad: &[f32], grad_scale: f32) {
        assert_eq!(
            value.len(),
            grad.len(),
            "Sgd: parameter {index} has {} values but {} gradients",
            value.len(),
            grad.len()
        );
        // Through the lent state, so that an update here and one during the all-reduce are the
        // same code.
        let mut lent = self.lend_state(index, value.len());
        lent.apply(0..value.len(), value, grad, grad_scale);
        self.give_back(index, lent);
    }

    /// The momentum buffer (allocated on the parameter's first step) and the rule.
    fn lend(&mut self, index: usize, len: usize) -> Option<LentState> {
        Some(self.lend_state(index, len))
    }

    fn give_back(&mut self, index: usize, state: LentState) {
        assert!(
            matches!(state.rule, ElementwiseRule::Sgd { .. }),
            "Sgd: the state of parameter {index} was lent by another optimizer (AdamW): give `step` the optimizer \
             that `backward` was given"
        );
        let [buffer, _] = state.buffers;
        if !buffer.is_empty() {
            *self.slot(index) = buffer;
        }
    }
}

impl Sgd {
    /// What `lend` lends: SGD can always lend.
    fn lend_state(&mut self, index: usize, len: usize) -> LentState {
        let rule = self.rule_for(index);
        let mut buffer = Vec::new();
        let mut first = false;
        if rule.momentum != 0.0 {
            buffer = std::mem::take(self.slot(index));
            first = buffer.is_empty();
            if first {
                crate::host::huge_pages::resize_zeroed(&mut buffer, len);
            }
            assert_eq!(buffer.len(), len, "Sgd: momentum buffer of parameter {index} has the wrong length");
        }
        LentState { rule: ElementwiseRule::Sgd { rule, first }, buffers: [buffer, Vec::new()] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one single-parameter step per gradient and returns the value after each.
    fn run(mut opt: Sgd, start: &[f32], grads: &[&[f32]]) -> Vec<Vec<f32>> {
        let mut value = start.to_vec();
        grads
            .iter()
            .map(|g| {
                opt.begin_step();
                opt.update(0, &mut value, g, 1.0);
                value.clone()
            })
            .collect()
    }

    fn assert_close(got: &[Vec<f32>], want: &[&[f32]]) {
        assert_eq!(got.len(), want.len());
        for (step, (g, w)) in got.iter().zip(want).enumerate() {
            for (a, b) in g.iter().zip(w.iter()) {
                assert!((a - b).abs() <= 1e-6, "step {step}: {g:?} vs {w:?}");
            }
        }
    }

    #[test]
    fn plain() {
        assert_close(&run(Sgd::new(0.1), &[1.0, 2.0], &[&[0.5, -1.0]]), &[&[0.95, 2.1]]);
    }

    #[test]
    fn momentum() {
        // buf: 1, 0.9·1 + 2 = 2.9, 0.9·2.9 + 0 = 2.61; p -= 0.1·buf.
        let got = run(Sgd::new(0.1).momentum(0.9), &[1.0], &[&[1.0], &[2.0], &[0.0]]);
        assert_close(&got, &[&[0.9], &[0.61], &[0.349]]);
    }

    #[test]
    fn nesterov() {
        // Step 1: buf 1, g + 0.9·buf = 1.9. Step 2: buf 2.9, 2 + 0.9·2.9 = 4.61.
        let got = run(Sgd::new(0.1).momentum(0.9).nesterov(true), &[1.0], &[&[1.0], &[2.0]]);
        assert_close(&got, &[&[0.81], &[0.349]]);
    }

    #[test]
    fn weight_decay_and_dampening() {
        // Step 1: g = 1 + 0.1·2 = 1.2, buf = 1.2 (no dampening on the first step), p = 1.88.
        // Step 2: g = 1 + 0.1·1.88 = 1.188, buf = 0.5·1.2 + 0.5·1.188 = 1.194, p = 1.7606.
        let opt = Sgd::new(0.1).momentum(0.5).dampening(0.5).weight_decay(0.1);
        assert_close(&run(opt, &[2.0], &[&[1.0], &[1.0]]), &[&[1.88], &[1.7606]]);
    }

    #[test]
    fn grad_scale_folds_into_gradient() {
        for make in [
            || Sgd::new(0.05).momentum(0.9).dampening(0.1).weight_decay(0.01),
            || Sgd::new(0.05).momentum(0.9).weight_decay(0.01).nesterov(true),
        ] {
            folds_into_gradient(make(), make());
        }
    }

    /// `a` updated from twice the gradients at half the scale, `b` as given: the same.
    fn folds_into_gradient(mut a: Sgd, mut b: Sgd) {
        let (mut pa, mut pb) = (vec![1.0, -2.0], vec![1.0, -2.0]);
        for g in [[0.3, -0.7], [1.1, 0.2], [-0.4, 0.9]] {
            a.begin_step();
            b.begin_step();
            a.update(3, &mut pa, &[2.0 * g[0], 2.0 * g[1]], 0.5);
            b.update(3, &mut pb, &g, 1.0);
        }
        assert_eq!(pa, pb);
        assert_eq!(a.momentum_buffer(3), b.momentum_buffer(3));
        assert_eq!(a.momentum_buffer(0), None);
    }

    /// What `torch.optim.SGD` refuses when it is made (observed in PyTorch 2.15: a negative
    /// learning rate, momentum or weight decay; Nesterov without momentum or with dampening),
    /// and a learning rate that is not a number, which it takes.
    #[test]
    fn settings_pytorch_refuses_panic_naming_the_value() {
        let message = |f: fn()| {
            let panic = std::panic::catch_unwind(f).expect_err("refused");
            panic.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        assert_eq!(message(|| drop(Sgd::new(-1.0))), "Sgd: learning rate -1: must be finite and not negative");
        assert!(message(|| drop(Sgd::new(f32::NAN))).starts_with("Sgd: learning rate NaN"));
        assert!(message(|| drop(Sgd::new(0.1).momentum(-0.5))).starts_with("Sgd: momentum -0.5"));
        assert!(message(|| drop(Sgd::new(0.1).weight_decay(-1.0))).starts_with("Sgd: weight decay -1"));
        let nesterov = message(|| Sgd::new(0.1).nesterov(true).begin_step());
        assert!(nesterov.starts_with("Sgd: Nesterov momentum requires a momentum and zero dampening"), "{nesterov}");
        assert!(message(|| Sgd::new(0.1).momentum(0.9).dampening(0.1).nesterov(true).begin_step())
            .contains("dampening 0.1"));
    }

    #[test]
    fn restored_buffer_continues_identically() {
        let mut a = Sgd::new(0.1).momentum(0.9);
        let mut pa = vec![1.0, 2.0];
        for g in [[1.0, -1.0], [0.5, 0.25]] {
            a.begin_step();
            a.update(1, &mut pa, &g, 1.0);
        }
        let mut b = Sgd::new(0.1).momentum(0.9);
        b.set_momentum_buffer(1, a.momentum_buffer(1).unwrap());
        let mut pb = pa.clone();
        a.update(1, &mut pa, &[0.3, 0.3], 1.0);
        b.update(1, &mut pb, &[0.3, 0.3], 1.0);
        assert_eq!(pa, pb);
    }

    #[test]
    fn lr_can_change() {
        let mut opt = Sgd::new(0.1);
        opt.set_lr(0.5);
        assert_eq!(opt.lr(), 0.5);
        let mut p = [1.0];
        opt.update(0, &mut p, &[1.0], 1.0);
        assert_eq!(p, [0.5]);
    }
}
