//! The plain settings of a training run. The `Trainer`'s builder fills them; the command line
//! fills them from its flags. Nothing here knows about either, and the devices (`backend`,
//! `cuda`) read them without reaching into the training loop.

use std::path::{Path, PathBuf};

use crate::comm::CommConfig;
use crate::memory::RunShape;
use crate::observe::ObserveConfig;

mod device;
mod optimizer;

pub use device::Device;
pub use optimizer::{OptimizerConfig, OptimizerKind};

/// Checkpoints: where, and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveConfig {
    /// The checkpoint folder: each save writes a `step-NNNNNNNN` folder in it, and `latest`
    /// names the newest; a resume from it continues from there.
    pub dir: PathBuf,
    /// Also every N steps; the last step always saves.
    pub every: Option<u64>,
    /// Replace another run's checkpoints found in `dir` (otherwise that is an error, unless
    /// this run resumes from `dir`).
    pub overwrite: bool,
}

/// Dropout while training: every `Dropout` layer of the model drops at `rate`, its masks drawn
/// from `seed` and the elements' places in the run (see `DropoutDraw`); the held-out loss and
/// sampling drop nothing. The default, rate 0, drops nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DropoutConfig {
    /// The share of elements dropped, in `[0, 1)` (nanoGPT's `dropout`).
    pub rate: f32,
    /// What the masks are drawn from: the same seed draws the same masks.
    pub seed: u64,
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
    "`TrainConfig::threads`",
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
    "`DropoutConfig::rate`",
    "`DropoutConfig::seed`",
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
    /// Which optimizer, its hyperparameters, learning-rate schedule and gradient clipping.
    pub optimizer: OptimizerConfig,
    /// How the ranks' gradients are summed; `fit` applies it to the communicator.
    pub comm: CommConfig,
    /// What the run records and writes about itself besides the loss: reports, trace, timeline.
    pub observe: ObserveConfig,
    /// Checkpoints; `None`: the run writes none (and a signal stops it without one).
    pub save: Option<SaveConfig>,
    /// The final parameters, written to this safetensors file by rank 0 at the end.
    pub save_params: Option<PathBuf>,
    /// Continue from the newest checkpoint in this folder.
    pub resume: Option<PathBuf>,
    /// Where every rank computes: its CPU, or one GPU per rank.
    pub device: Device,
    /// Threads for each rank's matrix products on the CPU, which OpenBLAS splits over them by
    /// blocks of the output; results agree with one thread to rounding. One by default: mpirun
    /// gives each rank one core, where a second thread only takes turns with the first. Set for
    /// the whole process when `fit` starts; no effect on a GPU.
    pub threads: usize,
    /// Stop cleanly on SIGTERM / SIGINT (see `stop`): finish the step, checkpoint, return
    /// `Error::Stopped`. Installs process-wide signal handlers for the run.
    pub stop_on_signals: bool,
    /// The loss on held-out data, every so many steps (the data is given to
    /// `Trainer::validate`) [default: none].
    pub validation: Option<ValidationConfig>,
    /// Dropout on training steps [default: none].
    pub dropout: DropoutConfig,
}

/// How often the held-out loss is measured, and on how much: `batches` batches of
/// `TrainConfig::batch` samples per rank, the same samples every time (nanoGPT's `estimate_loss`
/// with `eval_interval` and `eval_iters`, on a fixed draw).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidationConfig {
    /// After every `every` steps, and after the last.
    pub every: u64,
    /// Batches of `TrainConfig::batch` samples per rank each measurement reads.
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
            threads: 1,
            stop_on_signals: false,
            validation: None,
            dropout: DropoutConfig::default(),
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
            trains: true,
        }
    }

    /// The files the run writes besides its checkpoints, each with the setting that names it
    /// (`TrainConfig::save_params`, `ObserveConfig::trace`, ...): what is checked before step 1
    /// not to replace another output or an input.
    pub fn output_files(&self) -> impl Iterator<Item = (&Path, &'static str)> {
        let observe = &self.observe;
        [
            (&self.save_params, "`TrainConfig::save_params`"),
            (&observe.trace, "`ObserveConfig::trace`"),
            (&observe.timeline, "`ObserveConfig::timeline`"),
            (&observe.write_profile, "`ObserveConfig::write_profile`"),
        ]
        .into_iter()
        .filter_map(|(path, what)| path.as_deref().map(|p| (p, what)))
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
