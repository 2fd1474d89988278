//! The `Trainer`: the training loop for any `#[distributed_model]`, any `Loss` and any
//! `Dataset`, on the CPU or a GPU, with everything the examples have: overlap (or not, as the
//! `Communicator` is set), gradient accumulation, log lines and the report on rank 0, the
//! trace and timeline, checkpoints and resume.
//!
//! The facade's crate documentation (`overlap`) shows a whole run: a model, a loss and a
//! dataset of one's own, fitted by a `Trainer`.

mod agreement;
mod evaluate;
mod outputs;
mod prefetch;
mod preflight;
mod progress;
mod run;
mod same_start;
mod start_notes;
mod start_point;
mod stop;
mod summary;
mod tables;
mod validation;

use std::path::PathBuf;

use crate::checkpoint;
use crate::comm::{CommConfig, Communicator};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::loss::Loss;
use crate::model::DistributedModel;
use crate::params_file::{save_params_with_notes, FileNotes};
use crate::process::console;
use crate::profile::Cluster;

use crate::backend::CpuBackend;
pub use crate::config::{
    Device, DropoutConfig, OptimizerConfig, OptimizerKind, SaveConfig, TrainConfig, ValidationConfig,
};
pub use crate::error::signal_name;
pub use crate::observe::{ObserveConfig, ReportFormat};
pub use agreement::{agree, agree_on_outcome, agree_on_settings};
use outputs::claim_outputs;
use preflight::check;
pub use preflight::{check_recording, on_rank0};
pub use progress::{NoProgress, Progress};
use run::{fit_on_gpu, Run};
use start_point::resume;
pub use summary::TrainSummary;

/// A training run's settings, built up, then `fit` to a model, data and a loss.
pub struct Trainer<'c> {
    comm: &'c Communicator,
    config: TrainConfig,
    progress: Box<dyn Progress + 'c>,
    /// The held-out data of `TrainConfig::validation`.
    held_out: Option<&'c mut dyn Dataset>,
    /// `overwrite_checkpoints` was called: kept for a `save` that comes after it.
    overwrite: bool,
    /// What the parameters file the model was loaded from records (`started_from`).
    started_from: FileNotes,
}

impl<'c> Trainer<'c> {
    /// A run on `comm`'s ranks with the defaults of [`TrainConfig`]: 100 steps of 64 samples
    /// per rank, SGD (0.05, momentum 0.9), a text report at the end, on the CPU; its
    /// communication settings (`TrainConfig::comm`) start as `comm` has them, and `fit` applies
    /// them to it at the start of the run.
    pub fn new(comm: &'c Communicator) -> Self {
        let config = TrainConfig { comm: comm.config(), ..TrainConfig::default() };
        Trainer {
            comm,
            config,
            progress: Box::new(NoProgress),
            held_out: None,
            overwrite: false,
            started_from: FileNotes::default(),
        }
    }

    /// How the ranks' gradients are summed: overlap or not, an emulated link, finite checks,
    /// a run-time wire format and the wait timeout (see [`CommConfig`]).
    pub fn comm(mut self, comm: CommConfig) -> Self {
        self.config.comm = comm;
        self
    }

    /// Measures the mean loss on `held_out` (read as the training data is, by global index and
    /// sharded over the ranks) after every `every` steps and after the last: `batches` batches of
    /// `batch` samples per rank, the same ones each time. Logged on rank 0 and kept in the
    /// summary (`TrainSummary::validation_loss`).
    pub fn validate(mut self, held_out: &'c mut dyn Dataset, every: u64, batches: usize) -> Self {
        self.config.validation = Some(ValidationConfig { every, batches });
        self.held_out = Some(held_out);
        self
    }

    /// Trains with dropout: every `Dropout` layer drops at `rate` (in `[0, 1)`), its masks drawn
    /// from `seed` (see [`DropoutConfig`]).
    pub fn dropout(mut self, rate: f32, seed: u64) -> Self {
        self.config.dropout = DropoutConfig { rate, seed };
        self
    }

    /// Replaces every setting at once, `TrainConfig::comm` included (`..trainer.settings().clone()`
    /// keeps the communicator's) and `validation` (call `validate` after this).
    pub fn config(self, config: TrainConfig) -> Self {
        let overwrite = config.save.as_ref().is_some_and(|s| s.overwrite);
        Trainer { config, overwrite, ..self }
    }

    /// Optimizer steps to reach (a resumed run continues to this total).
    pub fn steps(mut self, steps: u64) -> Self {
        self.config.steps = steps;
        self
    }

    /// Samples per rank per micro-step.
    pub fn batch(mut self, batch: usize) -> Self {
        self.config.batch = batch;
        self
    }

    /// Threads for this process's matrix products on the CPU (see `TrainConfig::threads`).
    pub fn threads(mut self, threads: usize) -> Self {
        self.config.threads = threads;
        self
    }

    /// Micro-steps per optimizer step: gradients accumulate, only the last one communicates.
    pub fn accumulate(mut self, micro_steps: usize) -> Self {
        self.config.accumulate = micro_steps;
        self
    }

    /// Log the global loss and throughput every `steps` steps (rank 0).
    pub fn log_every(mut self, steps: u64) -> Self {
        self.config.log_every = steps;
        self
    }

    /// The optimizer and its settings (SGD or AdamW, the learning rate and its schedule, clipping).
    pub fn optimizer(mut self, optimizer: OptimizerConfig) -> Self {
        self.config.optimizer = optimizer;
        self
    }

    /// Checkpoints into `dir` at the end, and every `every` steps.
    pub fn save(mut self, dir: impl Into<PathBuf>, every: Option<u64>) -> Self {
        self.config.save = Some(SaveConfig { dir: dir.into(), every, overwrite: self.overwrite });
        self
    }

    /// Lets `save` replace another run's checkpoints in its folder (before or after `save`).
    pub fn overwrite_checkpoints(mut self) -> Self {
        self.overwrite = true;
        if let Some(save) = &mut self.config.save {
            save.overwrite = true;
        }
        self
    }

    /// Continues from the newest checkpoint in `dir`.
    pub fn resume(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.resume = Some(dir.into());
        self
    }

    /// The overlap report at the end (and every `every` steps).
    pub fn report(mut self, format: ReportFormat, every: Option<u64>) -> Self {
        self.config.observe.report = format;
        self.config.observe.report_every = every;
        self
    }

    /// Writes the final parameters to `path` (rank 0), as `params_file::save_params` does,
    /// within the run: a stop signal during the last step does not lose them.
    pub fn save_params(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.save_params = Some(path.into());
        self
    }

    /// A Chrome trace of every rank's spans.
    pub fn trace(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.observe.trace = Some(path.into());
        self
    }

    /// An SVG timeline of one representative step.
    pub fn timeline(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.observe.timeline = Some(path.into());
        self
    }

    /// Predicts this model's step on `cluster` from the times measured in this run.
    pub fn simulate(mut self, cluster: Cluster) -> Self {
        self.config.observe.simulate.push(cluster);
        self
    }

    /// Stop cleanly on SIGTERM or SIGINT: every rank finishes the step in flight, a checkpoint
    /// is written when the run saves, and `fit` returns `Error::Stopped`; a second signal ends
    /// the process at once.
    pub fn stop_on_signals(mut self) -> Self {
        self.config.stop_on_signals = true;
        self
    }

    /// Where the model computes: the CPU (the default) or a GPU (the `cuda` feature).
    pub fn device(mut self, device: Device) -> Self {
        self.config.device = device;
        self
    }

    /// What the parameters file the model was loaded from records beside its tensors
    /// (`params_file::load_into_with_notes`), carried into this run's checkpoints and parameters
    /// file: its vocabulary where the data records none (one that differs from the data's is
    /// refused), and the longest sequences its parameters were trained on where this run's are
    /// shorter, since the position embedding's rows past this run's were trained all the same.
    pub fn started_from(mut self, notes: FileNotes) -> Self {
        self.started_from = notes;
        self
    }

    /// A progress display for rank 0 (the command line's bar); log lines only by default.
    pub fn progress(mut self, progress: impl Progress + 'c) -> Self {
        self.progress = Box::new(progress);
        self
    }

    /// The settings `fit` will run with, as the builder calls so far made them.
    pub fn settings(&self) -> &TrainConfig {
        &self.config
    }

    /// Trains `model` on `data` against `loss` until `steps`, resuming first if asked. Every
    /// rank calls it with its own copy of the model (built by `M::new`, which gives every rank
    /// rank 0's values); on return `model` holds the trained parameters. Each call is a run of
    /// its own: from the parameters `model` holds (or the checkpoint `resume` names), at step 1
    /// and sample 0 with a fresh optimizer state, unless it resumes; to go on where a run
    /// stopped, save checkpoints and resume from them.
    ///
    /// An error on some ranks only (a dataset that fails on one) leaves the others waiting for
    /// them: dropping the communicator then ends the job, printing the error first, unless every
    /// rank failed and they meet within `comm::ABORT_GRACE` (as `Communicator::abort_job` does,
    /// which a program that reports the error itself may call first).
    pub fn fit<M: DistributedModel>(
        self,
        model: &mut M,
        data: &mut impl Dataset,
        loss: &impl Loss,
    ) -> Result<TrainSummary> {
        let comm = self.comm;
        noting_failure(comm, || self.fit_on_every_rank(model, data, loss))
    }

    fn fit_on_every_rank<M: DistributedModel>(
        self,
        model: &mut M,
        data: &mut impl Dataset,
        loss: &impl Loss,
    ) -> Result<TrainSummary> {
        let Trainer { comm, config, progress, held_out, overwrite, started_from } = self;
        if overwrite && config.save.is_none() {
            return Err(Error::Config(
                "`SaveConfig::overwrite` (`Trainer::overwrite_checkpoints`) is set, but the run saves no checkpoints \
                 (`Trainer::save`)"
                    .into(),
            ));
        }
        comm.apply(&config.comm)?;
        agreement::agree_on_settings(&config, comm)?;
        comm.agree_on_wire_formats()?;
        comm.agree_on_sharding(&M::SCHEDULE)?;
        check::<M>(&config, data, comm.world_size())?;
        preflight::check_lendable(&config, comm, model)?;
        validation::check(&config, data, held_out.as_deref())?;
        tables::check::<M>(data, "training")?;
        if let Some(held_out) = held_out.as_deref() {
            tables::check::<M>(held_out, "held-out")?;
        }
        if comm.rank() == 0 {
            for note in preflight::repeated_samples(&config, data, held_out.as_deref(), comm.world_size()) {
                console::err_line(&format!("note: {note}"));
            }
        }
        // Held until the run ends: no other run saves into this folder meanwhile, and a checkpoint
        // folder it made is removed again if the run ends before its first save (the folders made
        // to check the output files are gone already; their writers make them again).
        let inputs: Vec<PathBuf> = data.files().into_iter().chain(held_out.iter().flat_map(|h| h.files())).collect();
        let mut outputs = on_rank0(comm, || claim_outputs(&config, &inputs))?.unwrap_or_default();
        let mut optimizer = config.optimizer.build(&M::SCHEDULE);
        // Hashing the samples reads them all: only for the runs that compare or record it.
        let compared = comm.world_size() > 1 || config.save.is_some() || config.resume.is_some();
        let data_fingerprint = if compared { data.fingerprint() } else { None };
        let mut about = checkpoint::RunAbout {
            global_batch: config.global_batch(comm.world_size()),
            data: data.describe(),
            data_fingerprint: data_fingerprint.map(|hash| format!("{hash:016x}")),
            gradients: match config.comm.grad_comm {
                Some(format) => format!("{format} (chosen at run time)"),
                None => M::SCHEDULE.grad_comm().unwrap_or_else(|| "fp32".into()),
            },
            schedule: format!("{:016x}", M::SCHEDULE.plan_fingerprint()),
            optimizer: config.optimizer.summary(),
            vocabulary: data.vocabulary().or_else(|| started_from.vocabulary.clone()),
            // Token ids come in sequences, even of one position; other data only past one row.
            positions: (data.token_count().is_some() || data.positions() > 1).then(|| data.positions()),
            dropout: match config.dropout {
                DropoutConfig { rate: 0.0, .. } => "off".to_string(),
                DropoutConfig { rate, seed } => format!("rate {rate}, seed {seed}"),
            },
        };
        if let (Some(loaded), Some(now)) = (&started_from.vocabulary, &about.vocabulary) {
            if let Some(why) = crate::text::vocabulary_mismatch(loaded, now) {
                return Err(Error::Config(format!("the parameters the model started from: {why}")));
            }
        }
        // Each rank reads its own copy of the checkpoint: one that fails stops them all.
        let resumed = resume(&config, model, &mut optimizer, (comm.rank(), comm.world_size()), &about);
        let start_point::Resumed { position, low_rank, vocabulary, positions } =
            agree_on_outcome(comm, resumed, "load its copy of the checkpoint")?;
        if about.vocabulary.is_none() && vocabulary.is_some() {
            if comm.rank() == 0 {
                console::err_line("note: the data records no vocabulary; the run's files keep the checkpoint's");
            }
            about.vocabulary = vocabulary;
        }
        about.positions = [about.positions, positions, started_from.positions].into_iter().flatten().max();
        let samples = (data_fingerprint, data.describe());
        same_start::check(comm, model, &optimizer, position, config.resume.is_some(), samples, held_out.as_deref())?;
        start_point::steps_left(&config, position)?;
        if comm.shards_optimizer(&M::SCHEDULE) {
            // A checkpoint holds whole state (see `checkpoint::shards`): this rank keeps its slices.
            checkpoint::shards::keep_own(&mut optimizer, &M::SCHEDULE, comm);
        }
        // Every rank runs its products on the threads asked for; rank 0 says what may surprise.
        let threads_note = match config.device {
            Device::Cpu => crate::host::threads::use_for_products(config.threads),
            Device::Cuda { .. } => (config.threads > 1)
                .then(|| "threads for the products have no effect on a GPU, which runs them".to_string()),
        };
        if comm.rank() == 0 {
            start_notes::print::<M>(&config, comm, threads_note);
        }
        let progress = if comm.rank() == 0 { &*progress } else { &NoProgress };
        // Listening until every output is written: a signal after the last step has begun lets
        // the run finish (see `Run::steps`), parameters file included.
        let stop = config.stop_on_signals.then(stop::StopSignals::install).transpose()?;
        let notes = about.file_notes();
        let run = Run {
            comm,
            config: &config,
            progress,
            about,
            stop: stop.as_ref(),
            low_rank,
            held_out: held_out.map(|d| d as &mut dyn Dataset),
            checkpoint_folder: outputs.checkpoint_folder.as_mut(),
        };
        let summary = match config.device {
            Device::Cpu => run.steps(CpuBackend::new(model, optimizer, comm), position, data, loss),
            Device::Cuda { gpu } => fit_on_gpu(run, model, optimizer, gpu, position, data, loss),
        }?;
        if let (0, Some(path)) = (comm.rank(), &config.save_params) {
            save_params_with_notes(&*model, path, &notes)?;
        }
        if let (0, Some(signal)) = (comm.rank(), stop.as_ref().and_then(stop::StopSignals::received)) {
            console::err_line(&format!(
                "note: {} came after the last step had begun: the run finished and wrote all its outputs",
                signal_name(signal)
            ));
        }
        Ok(summary)
    }
}

/// `run`'s outcome, its error noted on `comm` (but a stop every rank agreed to, which ends
/// nothing): a communicator dropped after an error on some ranks only ends the job, printing it
/// first, rather than leave the others waiting (see `Trainer::fit`).
fn noting_failure<T>(comm: &Communicator, run: impl FnOnce() -> Result<T>) -> Result<T> {
    comm.note_failure(None);
    let outcome = run();
    match &outcome {
        Err(Error::Stopped { .. }) | Ok(_) => {}
        Err(failure) => comm.note_failure(Some(failure)),
    }
    outcome
}
