//! The plain settings of a training run. The `Trainer`'s builder fills them; the command line
//! fills them from its flags. Nothing here knows about either, and the devices (`backend`,
//! `cuda`) read them without reaching into the training loop.

use std::path::PathBuf;

use crate::comm::CommConfig;
use crate::memory::RunShape;
use crate::observe::ObserveConfig;
use overlap_plan::Schedule;

use crate::optim::{AdamW, ChosenOptimizer, DecayOn, LrSchedule, Sgd};

/// Which update rule, with PyTorch's defaults for what is left unset. The numbers are f64, as
/// PyTorch's Python floats are: AdamW computes its coefficients from them in f64 (`AdamWStep`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptimizerConfig {
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

impl OptimizerConfig {
    /// SGD with momentum 0.9 and no weight decay.
    pub fn sgd(lr: f64) -> Self {
        OptimizerConfig { lr: Some(lr), ..OptimizerConfig::default() }
    }

    /// AdamW with PyTorch's defaults (betas 0.9, 0.999; eps 1e-8; weight decay 0.01).
    pub fn adamw(lr: f64) -> Self {
        OptimizerConfig { kind: OptimizerKind::AdamW, lr: Some(lr), momentum: 0.0, ..OptimizerConfig::default() }
    }

    pub fn momentum(self, momentum: f64) -> Self {
        OptimizerConfig { momentum, ..self }
    }

    pub fn weight_decay(self, weight_decay: f64) -> Self {
        OptimizerConfig { weight_decay: Some(weight_decay), ..self }
    }

    pub fn betas(self, beta1: f64, beta2: f64) -> Self {
        OptimizerConfig { betas: (beta1, beta2), ..self }
    }

    pub fn eps(self, eps: f64) -> Self {
        OptimizerConfig { eps, ..self }
    }

    pub fn lr_schedule(self, lr_schedule: LrSchedule) -> Self {
        OptimizerConfig { lr_schedule, ..self }
    }

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
        let unsigned = |v: f64| v.is_finite() && v >= 0.0;
        let (lr, decay, (beta1, beta2)) = (self.base_lr(), self.base_weight_decay(), self.betas);
        let adamw = self.kind == OptimizerKind::AdamW;
        let problems = [
            (!unsigned(lr), format!("`OptimizerConfig::lr` {lr}: must be finite and not negative")),
            (!unsigned(decay), format!("`OptimizerConfig::weight_decay` {decay}: must be finite and not negative")),
            (
                !adamw && !unsigned(self.momentum),
                format!("`OptimizerConfig::momentum` {}: must be finite and not negative", self.momentum),
            ),
            (
                adamw && !((0.0..1.0).contains(&beta1) && (0.0..1.0).contains(&beta2)),
                format!("`OptimizerConfig::betas` ({beta1}, {beta2}): each must be in [0, 1)"),
            ),
            (
                adamw && !unsigned(self.eps),
                format!("`OptimizerConfig::eps` {}: must be finite and not negative", self.eps),
            ),
            (
                self.clip_grad_norm.is_some_and(|m| !(m.is_finite() && m > 0.0)),
                format!(
                    "`OptimizerConfig::clip_grad_norm` {}: the largest gradient norm must be positive and finite",
                    self.clip_grad_norm.unwrap_or_default()
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

/// Checkpoints: where, and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveConfig {
    pub dir: PathBuf,
    /// Also every N steps; the last step always saves.
    pub every: Option<u64>,
    /// Replace another run's checkpoints found in `dir` (otherwise that is an error, unless
    /// this run resumes from `dir`).
    pub overwrite: bool,
}

/// Where the model trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Device {
    /// This process's CPU (one thread computes, one communicates).
    #[default]
    Cpu,
    /// One NVIDIA GPU per process (needs the `cuda` feature); `gpu: None` is the MPI local rank.
    Cuda { gpu: Option<usize> },
}

impl Device {
    /// The GPU this rank uses: the one asked for, else its rank among the node's ranks (one
    /// process per GPU), as Open MPI's, MPICH's or Slurm's launcher numbers it. Where the launcher
    /// shows each rank its own GPU (`CUDA_VISIBLE_DEVICES` naming one), that GPU is 0 for every
    /// rank.
    pub fn gpu_ordinal(gpu: Option<usize>) -> usize {
        gpu.unwrap_or_else(|| gpu_of_local_rank(|name| std::env::var(name).ok()))
    }
}

/// The launchers' names for a process's rank among those of its node, in the order read.
const LOCAL_RANK_VARIABLES: &[&str] = &["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"];

/// `Device::gpu_ordinal` without a choice, over the environment `var` reads.
fn gpu_of_local_rank(var: impl Fn(&str) -> Option<String>) -> usize {
    let one_visible = var("CUDA_VISIBLE_DEVICES").is_some_and(|v| !v.trim().is_empty() && !v.contains(','));
    if one_visible {
        return 0;
    }
    LOCAL_RANK_VARIABLES.iter().find_map(|name| var(name)?.trim().parse().ok()).unwrap_or(0)
}

/// How the library's messages name a run's settings, each in backticks (``"`TrainConfig::batch`
/// 64 is too large ..."``): a front end that sets them otherwise, as the command line does with
/// its flags, shows its own names for them (`overlap-cli`'s `flags` maps every one of these).
pub const SETTING_NAMES: &[&str] = &[
    "`TrainConfig::steps`",
    "`TrainConfig::batch`",
    "`TrainConfig::accumulate`",
    "`TrainConfig::log_every`",
    "`TrainConfig::save_params`",
    "`TrainConfig::resume`",
    "`TrainConfig::device`",
    "`TrainConfig::device.gpu`",
    "`SaveConfig::dir`",
    "`SaveConfig::overwrite`",
    "`SaveConfig::every`",
    "`ValidationConfig::batches`",
    "`ObserveConfig::report`",
    "`ObserveConfig::report_every`",
    "`ObserveConfig::trace`",
    "`ObserveConfig::timeline`",
    "`ObserveConfig::write_profile`",
    "`ObserveConfig::simulate`",
    "`CommConfig::transport`",
    "`CommConfig::mode`",
    "`CommConfig::link`",
    "`CommConfig::wait_timeout`",
    "`CommConfig::check_finite`",
    "`CommConfig::grad_comm`",
    "`CommConfig::shard_optimizer`",
    "`OptimizerConfig::kind`",
    "`OptimizerConfig::lr`",
    "`OptimizerConfig::momentum`",
    "`OptimizerConfig::weight_decay`",
    "`OptimizerConfig::betas`",
    "`OptimizerConfig::eps`",
    "`OptimizerConfig::decay_on`",
    "`OptimizerConfig::lr_schedule`",
    "`OptimizerConfig::clip_grad_norm`",
    "`TrainConfig::validation`",
];

/// Everything about a run but the model, the data and the loss.
#[derive(Clone, Debug)]
pub struct TrainConfig {
    /// Optimizer steps to reach (a resumed run continues to this total).
    pub steps: u64,
    /// Samples per rank per micro-step.
    pub batch: usize,
    /// Micro-steps per optimizer step (only the last one communicates).
    pub accumulate: usize,
    /// Log the loss and throughput every N steps (and the first and last).
    pub log_every: u64,
    pub optimizer: OptimizerConfig,
    /// How the ranks' gradients are summed; `fit` applies it to the communicator.
    pub comm: CommConfig,
    pub observe: ObserveConfig,
    pub save: Option<SaveConfig>,
    /// The final parameters, written to this safetensors file by rank 0 at the end.
    pub save_params: Option<PathBuf>,
    /// Continue from the newest checkpoint in this folder.
    pub resume: Option<PathBuf>,
    pub device: Device,
    /// Stop cleanly on SIGTERM / SIGINT (see `stop`): finish the step, checkpoint, return
    /// `Error::Stopped`. Installs process-wide signal handlers for the run.
    pub stop_on_signals: bool,
    /// The loss on held-out data, every so many steps (the data is given to
    /// `Trainer::validate`) [default: none].
    pub validation: Option<ValidationConfig>,
}

/// How often the held-out loss is measured, and on how much: `batches` batches of
/// `TrainConfig::batch` samples per rank, the same samples every time (nanoGPT's `estimate_loss`
/// with `eval_interval` and `eval_iters`, on a fixed draw).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidationConfig {
    /// After every `every` steps, and after the last.
    pub every: u64,
    pub batches: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            steps: 100,
            batch: 64,
            accumulate: 1,
            log_every: 10,
            optimizer: OptimizerConfig::default(),
            comm: CommConfig::default(),
            observe: ObserveConfig::default(),
            save: None,
            save_params: None,
            resume: None,
            device: Device::Cpu,
            stop_on_signals: false,
            validation: None,
        }
    }
}

impl TrainConfig {
    /// The size of the run this describes, as observation budgets it, with what each
    /// micro-step keeps for backward (`memory::activation_bytes_of`).
    pub fn run_shape(&self, activation_bytes: Option<usize>) -> RunShape {
        RunShape {
            steps: self.steps,
            batch: self.batch,
            accumulate: self.accumulate,
            optimizer_buffers: self.optimizer.buffers_per_param(),
            optimizer_shards: 1,
            activation_bytes,
        }
    }

    /// Samples per optimizer step over all ranks.
    pub fn global_batch(&self, world_size: usize) -> u64 {
        (self.batch as u64).saturating_mul(self.accumulate as u64).saturating_mul(world_size as u64)
    }

    /// Whether step `step` (0-based) ends with a checkpoint: the last one, and every `every`.
    pub fn saves_after(&self, step: u64) -> bool {
        self.save
            .as_ref()
            .is_some_and(|s| step + 1 == self.steps || s.every.is_some_and(|n| (step + 1).is_multiple_of(n)))
    }

    /// Whether step `step` (0-based) ends with the held-out loss: every `every`, and the last.
    pub fn validates_after(&self, step: u64) -> bool {
        self.validation.is_some_and(|v| step + 1 == self.steps || (step + 1).is_multiple_of(v.every))
    }

    /// Whether step `step` logs its loss: the first one run, every `log_every`, the last.
    pub fn logs(&self, first_step: u64, step: u64) -> bool {
        step == first_step || (step + 1).is_multiple_of(self.log_every) || step + 1 == self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn each_launcher_s_local_rank_picks_the_gpu_unless_the_rank_sees_one() {
        assert_eq!(gpu_of_local_rank(env(&[])), 0);
        assert_eq!(gpu_of_local_rank(env(&[("OMPI_COMM_WORLD_LOCAL_RANK", "3")])), 3);
        assert_eq!(gpu_of_local_rank(env(&[("MPI_LOCALRANKID", "2")])), 2);
        assert_eq!(gpu_of_local_rank(env(&[("SLURM_LOCALID", "1")])), 1);
        assert_eq!(gpu_of_local_rank(env(&[("OMPI_COMM_WORLD_LOCAL_RANK", "1"), ("SLURM_LOCALID", "5")])), 1);
        assert_eq!(gpu_of_local_rank(env(&[("SLURM_LOCALID", "1"), ("CUDA_VISIBLE_DEVICES", "GPU-7f3a")])), 0);
        assert_eq!(gpu_of_local_rank(env(&[("SLURM_LOCALID", "1"), ("CUDA_VISIBLE_DEVICES", "0,1")])), 1);
        assert_eq!(Device::gpu_ordinal(Some(4)), 4);
    }
}
