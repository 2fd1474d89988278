//! Which update rule a run uses, with PyTorch's defaults for what is left unset, and the
//! settings every optimizer shares (learning-rate schedule, weight decay's targets, clipping).

use overlap_plan::Schedule;

use crate::optim::{AdamW, ChosenOptimizer, DecayOn, LrSchedule, Sgd};

/// Which update rule, with PyTorch's defaults for what is left unset. The numbers are f64, as
/// PyTorch's Python floats are: AdamW computes its coefficients from them in f64 (`AdamWStep`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptimizerConfig {
    /// SGD or AdamW.
    pub kind: OptimizerKind,
    /// Learning rate [default: 0.05 for SGD, 0.001 for AdamW].
    pub lr: Option<f64>,
    /// SGD's momentum (AdamW ignores it).
    pub momentum: f64,
    /// Weight decay [default: 0 for SGD, 0.01 for AdamW].
    pub weight_decay: Option<f64>,
    /// AdamW's `betas` (SGD ignores them) [default: 0.9, 0.999].
    pub betas: (f64, f64),
    /// AdamW's `eps` (SGD ignores it) [default: 1e-8].
    pub eps: f64,
    /// The learning rate over the run, from `lr` [default: constant].
    pub lr_schedule: LrSchedule,
    /// The parameters `weight_decay` applies to [default: all].
    pub decay_on: DecayOn,
    /// Clips the averaged gradients to this global norm before each update, as
    /// `torch.nn.utils.clip_grad_norm_` [default: no clipping].
    pub clip_grad_norm: Option<f64>,
}

/// The update rule of an `OptimizerConfig`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OptimizerKind {
    /// SGD with momentum (PyTorch's rule).
    #[default]
    Sgd,
    /// AdamW (PyTorch's rule and defaults).
    AdamW,
}

impl Default for OptimizerConfig {
    /// SGD, learning rate 0.05, momentum 0.9.
    fn default() -> Self {
        OptimizerConfig {
            kind: OptimizerKind::Sgd,
            lr: None,
            momentum: 0.9,
            weight_decay: None,
            betas: (0.9, 0.999),
            eps: 1e-8,
            lr_schedule: LrSchedule::Constant,
            decay_on: DecayOn::All,
            clip_grad_norm: None,
        }
    }
}

/// `value` as a message shows it: in exponent form where its decimal would run long (`-1e-50`,
/// not fifty digits).
fn shown(value: f64) -> String {
    let magnitude = value.abs();
    if value.is_finite() && value != 0.0 && !(1e-4..1e16).contains(&magnitude) {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}

impl OptimizerConfig {
    /// SGD with momentum 0.9 and no weight decay.
    pub fn sgd(lr: f64) -> Self {
        OptimizerConfig { lr: Some(lr), ..OptimizerConfig::default() }
    }

    /// AdamW with PyTorch's defaults (betas 0.9, 0.999; eps 1e-8; weight decay 0.01).
    pub fn adamw(lr: f64) -> Self {
        OptimizerConfig { kind: OptimizerKind::AdamW, lr: Some(lr), momentum: 0.0, ..OptimizerConfig::default() }
    }

    /// SGD's momentum (`torch.optim.SGD`'s `momentum`; AdamW ignores it).
    pub fn momentum(self, momentum: f64) -> Self {
        OptimizerConfig { momentum, ..self }
    }

    /// Weight decay: SGD's added to the gradient, AdamW's decoupled, as in PyTorch.
    pub fn weight_decay(self, weight_decay: f64) -> Self {
        OptimizerConfig { weight_decay: Some(weight_decay), ..self }
    }

    /// AdamW's `betas` (SGD ignores them).
    pub fn betas(self, beta1: f64, beta2: f64) -> Self {
        OptimizerConfig { betas: (beta1, beta2), ..self }
    }

    /// AdamW's `eps` (SGD ignores it).
    pub fn eps(self, eps: f64) -> Self {
        OptimizerConfig { eps, ..self }
    }

    /// The learning rate over the run (warm-up, cosine decay), from `lr`.
    pub fn lr_schedule(self, lr_schedule: LrSchedule) -> Self {
        OptimizerConfig { lr_schedule, ..self }
    }

    /// The parameters weight decay applies to: all, or matrices only (nanoGPT's groups).
    pub fn decay_on(self, decay_on: DecayOn) -> Self {
        OptimizerConfig { decay_on, ..self }
    }

    /// Clips the gradients to a global norm of `max_norm` before each update.
    pub fn clip_grad_norm(self, max_norm: f64) -> Self {
        OptimizerConfig { clip_grad_norm: Some(max_norm), ..self }
    }

    /// The base learning rate: `lr`, or the optimizer's default.
    pub fn base_lr(&self) -> f64 {
        self.lr.unwrap_or(match self.kind {
            OptimizerKind::Sgd => 0.05,
            OptimizerKind::AdamW => 1e-3,
        })
    }

    /// The settings the update rule reads, as `name: value` items joined by `; ` (a checkpoint
    /// records them, and a resume with others says which changed).
    pub fn summary(&self) -> String {
        let mut items = vec![format!("lr: {}", self.base_lr())];
        match self.kind {
            OptimizerKind::Sgd => items.push(format!("momentum: {}", self.momentum)),
            OptimizerKind::AdamW => {
                items.push(format!("betas: ({}, {})", self.betas.0, self.betas.1));
                items.push(format!("eps: {}", self.eps));
            }
        }
        items.push(format!("weight decay: {}", self.base_weight_decay()));
        items.push(format!("decay on: {:?}", self.decay_on).to_lowercase());
        items.push(format!("lr schedule: {}", self.lr_schedule));
        items.push(format!("clip grad norm: {}", self.clip_grad_norm.map_or_else(|| "off".into(), |n| n.to_string())));
        items.join("; ")
    }

    /// What makes these settings unusable, if anything: the values PyTorch's optimizers refuse
    /// in their constructors, and NaN or infinite ones, which would train to NaN silently.
    pub fn problem(&self) -> Option<String> {
        // The updates and the clip run in f32: a number is checked as they will see it (a positive
        // one that rounds to 0 or past f32; a negative one is refused for its sign below).
        let unsigned = |v: f64| (v as f32).is_finite() && v >= 0.0;
        let (lr, decay, (beta1, beta2)) = (self.base_lr(), self.base_weight_decay(), self.betas);
        let adamw = self.kind == OptimizerKind::AdamW;
        // (What an optimizer ignores is not checked: SGD has no eps, AdamW no momentum.)
        let used = [("lr", lr), ("weight_decay", decay), ("momentum", self.momentum), ("eps", self.eps)]
            .into_iter()
            .filter(|&(name, _)| if adamw { name != "momentum" } else { name != "eps" });
        let rounded = |v: f64| v as f32;
        let past_f32 = used
            .chain(self.clip_grad_norm.map(|m| ("clip_grad_norm", m)))
            .find(|&(_, v)| v.is_finite() && v > 0.0 && (rounded(v) == 0.0 || !rounded(v).is_finite()));
        if let Some((name, v)) = past_f32 {
            return Some(format!(
                "`OptimizerConfig::{name}` {v:e}: rounds to {} in f32, which the optimizer runs in",
                rounded(v)
            ));
        }
        let problems = [
            (!unsigned(lr), format!("`OptimizerConfig::lr` {}: must be finite and not negative", shown(lr))),
            (
                !unsigned(decay),
                format!("`OptimizerConfig::weight_decay` {}: must be finite and not negative", shown(decay)),
            ),
            (
                !adamw && !unsigned(self.momentum),
                format!("`OptimizerConfig::momentum` {}: must be finite and not negative", shown(self.momentum)),
            ),
            (
                adamw && !((0.0..1.0).contains(&beta1) && (0.0..1.0).contains(&beta2)),
                format!("`OptimizerConfig::betas` ({beta1}, {beta2}): each must be in [0, 1)"),
            ),
            (
                adamw && !unsigned(self.eps),
                format!("`OptimizerConfig::eps` {}: must be finite and not negative", shown(self.eps)),
            ),
            (
                self.clip_grad_norm.is_some_and(|m| !(m.is_finite() && m > 0.0)),
                format!(
                    "`OptimizerConfig::clip_grad_norm` {}: the largest gradient norm must be positive and finite",
                    shown(self.clip_grad_norm.unwrap_or_default())
                ),
            ),
        ];
        problems.into_iter().find_map(|(bad, why)| bad.then_some(why))
    }

    /// The weight decay: `weight_decay`, or the optimizer's default.
    pub fn base_weight_decay(&self) -> f64 {
        self.weight_decay.unwrap_or(match self.kind {
            OptimizerKind::Sgd => 0.0,
            OptimizerKind::AdamW => 0.01,
        })
    }

    /// A fresh optimizer with these settings and no state (SGD keeps its numbers in f32), for
    /// the parameters of `schedule` (which of them decay).
    pub fn build(&self, schedule: &Schedule) -> ChosenOptimizer {
        let mut optimizer = match self.kind {
            OptimizerKind::Sgd => {
                let sgd = Sgd::new(self.base_lr() as f32)
                    .momentum(self.momentum as f32)
                    .weight_decay(self.base_weight_decay() as f32);
                ChosenOptimizer::Sgd(match self.clip_grad_norm {
                    Some(max_norm) => sgd.clip_grad_norm(max_norm as f32),
                    None => sgd,
                })
            }
            OptimizerKind::AdamW => {
                let adamw = AdamW::new(self.base_lr())
                    .betas(self.betas.0, self.betas.1)
                    .eps(self.eps)
                    .weight_decay(self.base_weight_decay());
                ChosenOptimizer::AdamW(match self.clip_grad_norm {
                    Some(max_norm) => adamw.clip_grad_norm(max_norm as f32),
                    None => adamw,
                })
            }
        };
        if self.decay_on == DecayOn::Matrices {
            for p in schedule.params() {
                let info = schedule.param(p);
                if info.shape.len() < 2 {
                    optimizer.exempt_from_decay(info.index);
                }
            }
        }
        optimizer
    }

    /// Buffers the optimizer keeps per parameter element (momentum; AdamW's two moments).
    pub fn buffers_per_param(&self) -> usize {
        match self.kind {
            OptimizerKind::Sgd if self.momentum > 0.0 => 1,
            OptimizerKind::Sgd => 0,
            OptimizerKind::AdamW => 2,
        }
    }
}
