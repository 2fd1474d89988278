//! The flags in the runtime's terms: the plain settings structs a `Trainer` takes.

use std::time::Duration;

use overlap_runtime::optim::DecayOn;
use overlap_runtime::train::{
    Device as RunDevice, DropoutConfig, ObserveConfig, OptimizerConfig, OptimizerKind as RunOptimizer,
    ReportFormat as RunReport, SaveConfig, TrainConfig, ValidationConfig,
};
use overlap_runtime::{CommConfig, CommMode};

use super::{DecayOnArg, Device, OptimizerKind, ReportFormat, TrainArgs};

impl TrainArgs {
    /// The run these flags describe, in the runtime's terms.
    pub fn train_config(&self) -> TrainConfig {
        TrainConfig {
            steps: self.steps,
            batch: self.batch,
            accumulate: self.accumulate,
            log_every: self.log_every,
            optimizer: OptimizerConfig {
                kind: match self.optimizer {
                    OptimizerKind::Sgd => RunOptimizer::Sgd,
                    OptimizerKind::Adamw => RunOptimizer::AdamW,
                },
                lr: self.lr,
                momentum: self.momentum,
                weight_decay: self.weight_decay,
                betas: (self.beta1, self.beta2),
                eps: self.eps,
                lr_schedule: self.lr_schedule,
                decay_on: match self.decay_on {
                    DecayOnArg::All => DecayOn::All,
                    DecayOnArg::Matrices => DecayOn::Matrices,
                },
                clip_grad_norm: self.clip_grad_norm.and_then(|c| c.0),
            },
            comm: self.comm_config(),
            observe: self.observe_config(),
            save: self.save.clone().map(|dir| SaveConfig { dir, every: self.save_every, overwrite: self.overwrite }),
            save_params: self.save_params.clone(),
            resume: self.resume.clone(),
            device: match self.device {
                Device::Cpu => RunDevice::Cpu,
                Device::Cuda => RunDevice::Cuda { gpu: self.gpu },
            },
            threads: self.threads,
            // A training binary stops cleanly when a scheduler asks it to.
            stop_on_signals: true,
            validation: self.validation_every().map(|every| ValidationConfig { every, batches: self.eval_batches }),
            dropout: DropoutConfig { rate: self.dropout, seed: self.seed },
        }
    }

    /// How the ranks' gradients are summed.
    pub fn comm_config(&self) -> CommConfig {
        CommConfig {
            transport: self.all_reduce.into(),
            mode: match (self.no_overlap, self.compute_only) {
                (true, _) => CommMode::AfterBackward,
                (_, true) => CommMode::Skip,
                _ => CommMode::Overlap,
            },
            link: self.link,
            check_finite: self.check_finite,
            grad_comm: self.grad_comm,
            wait_timeout: self.comm_timeout(),
            shard_optimizer: match (self.shard_optimizer, self.no_shard_optimizer) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            },
        }
    }

    /// What the run records and writes about itself.
    pub fn observe_config(&self) -> ObserveConfig {
        ObserveConfig {
            report: match self.report {
                ReportFormat::Text => RunReport::Text,
                ReportFormat::Json => RunReport::Json,
                ReportFormat::Off => RunReport::Off,
            },
            report_every: self.report_every,
            trace: self.trace.clone(),
            timeline: self.timeline.clone(),
            write_profile: self.write_profile.clone(),
            simulate: self.simulate.clone(),
        }
    }

    /// `--comm-timeout`, or the default bound when it is not given.
    pub fn comm_timeout(&self) -> Option<Duration> {
        self.comm_timeout.map_or(Some(overlap_runtime::comm::DEFAULT_COMM_TIMEOUT), |t| t.0)
    }
}
