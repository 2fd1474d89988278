//! Adam with decoupled weight decay, following PyTorch's `torch.optim.AdamW` update rule.

use super::clip::GradClip;
use super::elementwise::{AdamWStep, ElementwiseRule, LentState};
use super::optimizer::{assert_non_negative, Optimizer};
use super::schedule::DecayExemptions;

/// AdamW. Its constructor and setters panic on what PyTorch's constructor refuses (`lr >= 0`,
/// `eps >= 0`, `weight_decay >= 0`, betas in `[0, 1)`); `OptimizerConfig`, from which the
/// `Trainer` builds its optimizer, reports each as an error before step 1 instead, and so does the
/// command line.
///
/// They are f64, as PyTorch's Python floats are: `1 - beta2` and the bias corrections are
/// computed from the f64 values and rounded to f32 only where PyTorch's tensor ops round them
/// (`AdamWStep`). From f32 betas, `1 - beta2` alone is 1.3e-5 off, and a step from a state
/// PyTorch wrote is about 1e-5 off.
#[derive(Clone, Debug)]
pub struct AdamW {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
    /// Parameters exempt from weight decay (`exempt_from_decay`).
    exempt: DecayExemptions,
    /// Clipping by the global gradient norm, when set (`clip_grad_norm`).
    clip: Option<GradClip>,
    /// Steps begun so far; the bias corrections use it, so it is shared by all parameters.
    step: u64,
    /// First and second moments per parameter index, allocated on that parameter's first
    /// update so a steady-state step never allocates; empty while lent (`lend`).
    exp_avg: Vec<Vec<f32>>,
    exp_avg_sq: Vec<Vec<f32>>,
}

impl AdamW {
    /// PyTorch's defaults: betas (0.9, 0.999), eps 1e-8, weight decay 1e-2.
    pub fn new(lr: f64) -> Self {
        assert_non_negative("AdamW", "learning rate", lr);
        AdamW {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 1e-2,
            exempt: DecayExemptions::default(),
            clip: None,
            step: 0,
            exp_avg: Vec::new(),
            exp_avg_sq: Vec::new(),
        }
    }

    /// `torch.optim.AdamW`'s `betas`: the decay of the gradient's mean and of its square's.
    pub fn betas(mut self, beta1: f64, beta2: f64) -> Self {
        assert!(
            (0.0..1.0).contains(&beta1) && (0.0..1.0).contains(&beta2),
            "AdamW: betas ({beta1}, {beta2}): each must be in [0, 1)"
        );
        self.beta1 = beta1;
        self.beta2 = beta2;
        self
    }

    /// `torch.optim.AdamW`'s `eps`, added to the root of the squares' mean.
    pub fn eps(mut self, eps: f64) -> Self {
        assert_non_negative("AdamW", "eps", eps);
        self.eps = eps;
        self
    }

    /// Decoupled decay: parameters shrink by `lr·weight_decay` each step, apart from the
    /// gradient.
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        assert_non_negative("AdamW", "weight decay", weight_decay);
        self.weight_decay = weight_decay;
        self
    }

    /// Clips the gradients to a global norm of `max_norm` before each update, as
    /// `torch.nn.utils.clip_grad_norm_(max_norm)` before `step()`.
    pub fn clip_grad_norm(mut self, max_norm: f32) -> Self {
        self.clip = Some(GradClip::new(max_norm));
        self
    }

    /// The learning rate the next update uses.
    pub fn lr(&self) -> f64 {
        self.lr
    }

    /// Changes the learning rate from the next update on (for schedules).
    pub fn set_lr(&mut self, lr: f64) {
        assert_non_negative("AdamW", "learning rate", lr);
        self.lr = lr;
    }

    /// Number of steps begun (PyTorch's `state['step']`).
    pub fn step_count(&self) -> u64 {
        self.step
    }

    /// Restores the step counter from a checkpoint.
    pub fn set_step_count(&mut self, step: u64) {
        self.step = step;
    }

    /// First moment of parameter `index`, or `None` before its first update.
    pub fn exp_avg(&self, index: usize) -> Option<&[f32]> {
        self.exp_avg.get(index).filter(|m| !m.is_empty()).map(Vec::as_slice)
    }

    /// Second moment of parameter `index`, or `None` before its first update.
    pub fn exp_avg_sq(&self, index: usize) -> Option<&[f32]> {
        self.exp_avg_sq.get(index).filter(|v| !v.is_empty()).map(Vec::as_slice)
    }

    /// Restores both moments of parameter `index` from a checkpoint.
    pub fn set_state(&mut self, index: usize, exp_avg: &[f32], exp_avg_sq: &[f32]) {
        assert_eq!(exp_avg.len(), exp_avg_sq.len(), "AdamW: moments of parameter {index} differ in length");
        self.grow(index);
        crate::host::huge_pages::assign(&mut self.exp_avg[index], exp_avg);
        crate::host::huge_pages::assign(&mut self.exp_avg_sq[index], exp_avg_sq);
    }

    fn grow(&mut self, index: usize) {
        if index >= self.exp_avg.len() {
            self.exp_avg.resize_with(index + 1, Vec::new);
            self.exp_avg_sq.resize_with(index + 1, Vec::new);
        }
    }
}

impl AdamW {
    /// Parameter `index` is not decayed (as a PyTorch parameter group with `weight_decay` 0,
    /// whose update multiplies by exactly 1).
    pub fn exempt_from_decay(&mut self, index: usize) {
        self.exempt.insert(index);
    }

    /// `current_step` for parameter `index`: without decay where it is exempt.
    pub fn step_for(&self, index: usize) -> AdamWStep {
        let step = self.current_step();
        if self.exempt.contains(index) {
            AdamWStep { decay: 1.0, ..step }
        } else {
            step
        }
    }

    /// The coefficients of the step begun last, as `torch.optim.AdamW` computes them in Python.
    pub fn current_step(&self) -> AdamWStep {
        // PyTorch keeps `step` as a float tensor and raises the betas to its `.item()`: `b ** t`
        // on two Python floats is C's `pow`, which `powf` calls too. It underflows to 0
        // gracefully for large t.
        let t = self.step as f64;
        let bias_correction1 = 1.0 - self.beta1.powf(t);
        let bias_correction2 = 1.0 - self.beta2.powf(t);
        AdamWStep {
            decay: (1.0 - self.lr * self.weight_decay) as f32,
            lerp_weight: (1.0 - self.beta1) as f32,
            beta2: self.beta2 as f32,
            one_minus_beta2: (1.0 - self.beta2) as f32,
            // `bias_correction2 ** 0.5` in Python: C's `pow`, which may differ from `sqrt` by an
            // ulp; the opaque exponent keeps the compiler from turning one into the other.
            bias_correction2_sqrt: bias_correction2.powf(std::hint::black_box(0.5)) as f32,
            eps: self.eps as f32,
            neg_step_size: (-(self.lr / bias_correction1)) as f32,
        }
    }
}

impl Optimizer for AdamW {
    fn grad_clip(&mut self) -> Option<&mut GradClip> {
        self.clip.as_mut()
    }

    fn begin_step(&mut self) {
        self.step += 1;
    }

    fn update(&mut self, index: usize, value: &mut [f32], grad: &[f32], grad_scale: f32) {
        assert!(self.step > 0, "AdamW: begin_step must be called before update");
        assert_eq!(
            value.len(),
            grad.len(),
            "AdamW: parameter {index} has {} values but {} gradients",
            value.len(),
            grad.len()
        );
        // Through the lent state, so that an update here and one during the all-reduce are the
        // same code.
        let mut lent = self.lend_state(index, value.len());
        lent.apply(0..value.len(), value, grad, grad_scale);
        self.give_back(index, lent);
    }

    /// Both moments (allocated on the parameter's first step) and this step's coefficients.
    fn lend(&mut self, index: usize, len: usize) -> Option<LentState> {
        assert!(self.step > 0, "AdamW: begin_step must be called before lend");
        Some(self.lend_state(index, len))
    }

    fn give_back(&mut self, index: usize, state: LentState) {
        assert!(
            matches!(state.rule, ElementwiseRule::AdamW(_)),
            "AdamW: the state of parameter {index} was lent by another optimizer (SGD): give `step` the optimizer \
             that `backward` was given"
        );
        let [m, v] = state.buffers;
        self.grow(index);
        self.exp_avg[index] = m;
        self.exp_avg_sq[index] = v;
    }
}

impl AdamW {
    /// What `lend` lends: AdamW can always lend.
    fn lend_state(&mut self, index: usize, len: usize) -> LentState {
        self.grow(index);
        let mut m = std::mem::take(&mut self.exp_avg[index]);
        let mut v = std::mem::take(&mut self.exp_avg_sq[index]);
        if m.is_empty() {
            crate::host::huge_pages::resize_zeroed(&mut m, len);
            crate::host::huge_pages::resize_zeroed(&mut v, len);
        }
        assert_eq!(m.len(), len, "AdamW: state of parameter {index} has the wrong length");
        LentState { rule: ElementwiseRule::AdamW(self.step_for(index)), buffers: [m, v] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `torch.optim.AdamW` refuses when it is made (observed in PyTorch 2.15).
    #[test]
    fn settings_pytorch_refuses_panic_naming_the_value() {
        let message = |f: fn()| {
            let panic = std::panic::catch_unwind(f).expect_err("refused");
            panic.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        assert!(message(|| drop(AdamW::new(f64::NAN))).starts_with("AdamW: learning rate NaN"));
        assert!(message(|| drop(AdamW::new(0.1).betas(1.0, 0.9))).starts_with("AdamW: betas (1, 0.9)"));
        assert!(message(|| drop(AdamW::new(0.1).betas(0.9, -0.1))).starts_with("AdamW: betas (0.9, -0.1)"));
        assert!(message(|| drop(AdamW::new(0.1).eps(-1.0))).starts_with("AdamW: eps -1"));
        assert!(message(|| drop(AdamW::new(0.1).weight_decay(-1.0))).starts_with("AdamW: weight decay -1"));
    }

    fn assert_close(got: f32, want: f64) {
        assert!((f64::from(got) - want).abs() <= 1e-6 * want.abs().max(1.0), "{got} vs {want}");
    }

    #[test]
    fn defaults_with_bias_correction() {
        // Reference: the PyTorch rule evaluated in f64 by hand (lr 0.1, defaults otherwise).
        let mut opt = AdamW::new(0.1);
        let mut p = [1.0f32];
        let want = [
            (0.899_000_002, 0.05, 0.000_25),
            (0.934_711_354_238_565_3, -0.055, 0.001_249_75),
            (0.947_445_708_982_737_5, -0.0245, 0.001_311_000_25),
        ];
        for (g, (p_want, m_want, v_want)) in [0.5, -1.0, 0.25].into_iter().zip(want) {
            opt.begin_step();
            opt.update(0, &mut p, &[g], 1.0);
            assert_close(p[0], p_want);
            assert_close(opt.exp_avg(0).unwrap()[0], m_want);
            assert_close(opt.exp_avg_sq(0).unwrap()[0], v_want);
        }
        assert_eq!(opt.step_count(), 3);
    }

    #[test]
    fn custom_betas_eps_without_decay() {
        let mut opt = AdamW::new(0.01).betas(0.8, 0.9).eps(1e-3).weight_decay(0.0);
        let mut p = [-0.5f32];
        for (g, want) in [(2.0, -0.509_995_002_498_750_6), (1.0, -0.519_272_261_958_112_8)] {
            opt.begin_step();
            opt.update(0, &mut p, &[g], 1.0);
            assert_close(p[0], want);
        }
    }

    #[test]
    fn grad_scale_folds_into_gradient() {
        let (mut a, mut b) = (AdamW::new(0.01), AdamW::new(0.01));
        let (mut pa, mut pb) = (vec![0.5, -1.5], vec![0.5, -1.5]);
        for g in [[0.3, -0.7], [1.1, 0.2]] {
            a.begin_step();
            b.begin_step();
            a.update(2, &mut pa, &[2.0 * g[0], 2.0 * g[1]], 0.5);
            b.update(2, &mut pb, &g, 1.0);
        }
        assert_eq!(pa, pb);
        assert_eq!(a.exp_avg_sq(2), b.exp_avg_sq(2));
        assert_eq!(a.exp_avg(1), None);
    }

    #[test]
    fn restored_state_continues_identically() {
        let mut a = AdamW::new(0.01);
        let mut pa = vec![1.0, 2.0];
        for g in [[1.0, -1.0], [0.5, 0.25]] {
            a.begin_step();
            a.update(0, &mut pa, &g, 1.0);
        }
        let mut b = AdamW::new(0.01);
        b.set_step_count(a.step_count());
        b.set_state(0, a.exp_avg(0).unwrap(), a.exp_avg_sq(0).unwrap());
        let mut pb = pa.clone();
        for opt in [&mut a, &mut b] {
            opt.begin_step();
        }
        a.update(0, &mut pa, &[0.3, 0.3], 1.0);
        b.update(0, &mut pb, &[0.3, 0.3], 1.0);
        assert_eq!(pa, pb);
    }

    #[test]
    #[should_panic(expected = "AdamW: begin_step must be called before update")]
    fn update_before_begin_step_panics() {
        AdamW::new(0.1).update(0, &mut [1.0], &[1.0], 1.0);
    }
}
