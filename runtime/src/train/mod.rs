//! The `Trainer`: the training loop for any `#[distributed_model]`, any `Loss` and any
//! `Dataset`, on the CPU or a GPU, with everything the examples have: overlap (or not, as the
//! `Communicator` is set), gradient accumulation, log lines and the report on rank 0, the
//! trace and timeline, checkpoints and resume.
//!
//! The facade's crate documentation (`overlap`) shows a whole run: a model, a loss and a
//! dataset of one's own, fitted by a `Trainer`.

mod preflight;
mod progress;
mod stop;
mod summary;
mod validation;

use std::path::PathBuf;
use std::time::Instant;

use crate::checkpoint::{self, Position};
use crate::comm::{CommConfig, Communicator};
use crate::data::{shard_start_after, Batch, Dataset};
use crate::error::{Error, Result};
use crate::fault;
use crate::layer::StepContext;
use crate::loss::Loss;
use crate::model::DistributedModel;
use crate::observe::Observer;
use crate::optim::{ChosenOptimizer, LrSchedule};
use crate::params_file::save_params_with_vocabulary;
use crate::process::console;
use crate::profile::Cluster;
use crate::trace;

use crate::backend::{CpuBackend, StepBackend};
pub use crate::config::{Device, OptimizerConfig, OptimizerKind, SaveConfig, TrainConfig, ValidationConfig};
pub use crate::error::signal_name;
pub use crate::observe::{ObserveConfig, ReportFormat};
pub use preflight::on_rank0;
use preflight::{check, claim_outputs, resume};
pub use progress::{NoProgress, Progress};
use summary::LossLog;
pub use summary::TrainSummary;

/// A training run's settings, built up, then `fit` to a model, data and a loss.
pub struct Trainer<'c> {
    comm: &'c Communicator,
    config: TrainConfig,
    progress: Box<dyn Progress + 'c>,
    /// The held-out data of `TrainConfig::validation`.
    held_out: Option<&'c mut dyn Dataset>,
}

impl<'c> Trainer<'c> {
    /// A run on `comm`'s ranks with the defaults of [`TrainConfig`]: 100 steps of 64 samples
    /// per rank, SGD (0.05, momentum 0.9), a text report at the end, on the CPU; its
    /// communication settings (`TrainConfig::comm`) start as `comm` has them, and `fit` applies
    /// them to it at the start of the run.
    pub fn new(comm: &'c Communicator) -> Self {
        let config = TrainConfig { comm: comm.config(), ..TrainConfig::default() };
        Trainer { comm, config, progress: Box::new(NoProgress), held_out: None }
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

    /// Replaces every setting at once.
    pub fn config(self, config: TrainConfig) -> Self {
        Trainer { config, ..self }
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

    pub fn optimizer(mut self, optimizer: OptimizerConfig) -> Self {
        self.config.optimizer = optimizer;
        self
    }

    /// Checkpoints into `dir` at the end, and every `every` steps.
    pub fn save(mut self, dir: impl Into<PathBuf>, every: Option<u64>) -> Self {
        self.config.save = Some(SaveConfig { dir: dir.into(), every, overwrite: false });
        self
    }

    /// Lets `save` replace another run's checkpoints in its folder.
    pub fn overwrite_checkpoints(mut self) -> Self {
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

    pub fn device(mut self, device: Device) -> Self {
        self.config.device = device;
        self
    }

    /// A progress display for rank 0 (the command line's bar); log lines only by default.
    pub fn progress(mut self, progress: impl Progress + 'c) -> Self {
        self.progress = Box::new(progress);
        self
    }

    pub fn settings(&self) -> &TrainConfig {
        &self.config
    }

    /// Trains `model` on `data` against `loss` until `steps`, resuming first if asked. Every
    /// rank calls it with its own copy of the model (built by `M::new`, which gives every rank
    /// rank 0's values); on return `model` holds the trained parameters.
    pub fn fit<M: DistributedModel>(
        self,
        model: &mut M,
        data: &mut impl Dataset,
        loss: &impl Loss,
    ) -> Result<TrainSummary> {
        let Trainer { comm, config, progress, held_out } = self;
        comm.apply(&config.comm)?;
        comm.agree_on_sharding(&M::SCHEDULE)?;
        check::<M>(&config, data, comm.world_size())?;
        preflight::check_lendable(&config, comm, model)?;
        validation::check(&config, data, held_out.as_deref())?;
        // Held until the run ends: no other run saves into this folder meanwhile.
        let _checkpoint_folder = on_rank0(comm, || claim_outputs(&config))?.flatten();
        let mut optimizer = config.optimizer.build(&M::SCHEDULE);
        let about = checkpoint::RunAbout {
            global_batch: config.global_batch(comm.world_size()),
            data: data.describe(),
            gradients: match config.comm.grad_comm {
                Some(format) => format!("{format} (chosen at run time)"),
                None => M::SCHEDULE.grad_comm().unwrap_or_else(|| "fp32".into()),
            },
            schedule: format!("{:016x}", M::SCHEDULE.fingerprint()),
            vocabulary: data.vocabulary(),
        };
        let (position, low_rank) = resume(&config, model, &mut optimizer, (comm.rank(), comm.world_size()), &about)?;
        if comm.shards_optimizer() {
            // A checkpoint holds whole state (see `checkpoint::shards`): this rank keeps its slices.
            checkpoint::shards::keep_own(&mut optimizer, &M::SCHEDULE, comm);
        }
        if let (0, Device::Cpu, Some(fitting)) = (comm.rank(), config.device, crate::host::blas_core::mismatch()) {
            console::err_line(&format!(
                "note: OpenBLAS runs its {} kernels, and this CPU runs {fitting}'s (several times faster): set \
                 {}={fitting} before the program starts",
                crate::host::blas_core::chosen(),
                crate::host::blas_core::CORETYPE_VARIABLE
            ));
        }
        let progress = if comm.rank() == 0 { &*progress } else { &NoProgress };
        // Listening until every output is written: a signal after the last step has begun lets
        // the run finish (see `Run::steps`), parameters file included.
        let stop = config.stop_on_signals.then(stop::StopSignals::install).transpose()?;
        let about_vocabulary = about.vocabulary.clone();
        let run = Run {
            comm,
            config: &config,
            progress,
            about,
            stop: stop.as_ref(),
            low_rank,
            held_out: held_out.map(|d| d as &mut dyn Dataset),
        };
        let summary = match config.device {
            Device::Cpu => run.steps(CpuBackend::new(model, optimizer, comm), position, data, loss),
            Device::Cuda { gpu } => fit_on_gpu(run, model, optimizer, gpu, position, data, loss),
        }?;
        if let (0, Some(path)) = (comm.rank(), &config.save_params) {
            save_params_with_vocabulary(&*model, path, about_vocabulary.as_deref())?;
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

/// Every rank's slices of the optimizer state, joined at rank 0 for a checkpoint, when the run
/// shards them (a collective: every rank is here); `None` otherwise and on the other ranks.
fn join_shards<M: DistributedModel>(
    backend: &mut impl StepBackend<M>,
    comm: &Communicator,
) -> Result<Option<checkpoint::shards::Joined>> {
    if !comm.shards_optimizer() {
        return Ok(None);
    }
    let (_, optimizer) = backend.host_state()?;
    checkpoint::shards::gather(optimizer, &M::SCHEDULE, comm)
}

/// Rank 0 writes a checkpoint of the backend's state into `save.dir`: the optimizer state joined
/// from every rank's slices when it is sharded (`joined`), the backend's own otherwise.
fn write_checkpoint<M: DistributedModel>(
    backend: &mut impl StepBackend<M>,
    save: &SaveConfig,
    position: Position,
    about: &checkpoint::RunAbout,
    low_rank: Option<checkpoint::low_rank::Gathered>,
    joined: Option<checkpoint::shards::Joined>,
) -> Result<PathBuf> {
    let (model, optimizer) = backend.host_state()?;
    match &joined {
        Some(joined) => checkpoint::save(&save.dir, model, joined, position, about, low_rank.as_ref()),
        None => checkpoint::save(&save.dir, model, optimizer, position, about, low_rank.as_ref()),
    }
}

/// Rank 0's checkpoint write (`written`, `None` elsewhere), shared: every rank returns rank 0's
/// folder, or an error when the write failed (rank 0 its own), so that every rank stops alike.
fn shared_outcome(comm: &Communicator, written: Option<Result<PathBuf>>) -> Result<Option<PathBuf>> {
    let mut ok = [u8::from(!matches!(written, Some(Err(_))))];
    comm.broadcast_bytes_from_root(&mut ok)?;
    match written {
        Some(result) => result.map(Some),
        None if ok[0] == 1 => Ok(None),
        None => Err(Error::Checkpoint("rank 0 could not write the checkpoint (its message says why)".into())),
    }
}

/// The run `fit` is doing.
struct Run<'r> {
    comm: &'r Communicator,
    config: &'r TrainConfig,
    /// Rank 0's display; `NoProgress` elsewhere.
    progress: &'r dyn Progress,
    /// What the run reads, recorded in its checkpoints.
    about: checkpoint::RunAbout,
    /// Listening for SIGTERM / SIGINT, when the run stops on them.
    stop: Option<&'r stop::StopSignals>,
    /// This rank's PowerSGD state from the checkpoint resumed, for the buckets.
    low_rank: Option<checkpoint::low_rank::Restored>,
    /// The held-out data, when the run validates.
    held_out: Option<&'r mut dyn Dataset>,
}

#[cfg(feature = "cuda")]
fn fit_on_gpu<M: DistributedModel>(
    run: Run,
    model: &mut M,
    optimizer: ChosenOptimizer,
    gpu: Option<usize>,
    position: Position,
    data: &mut impl Dataset,
    loss: &impl Loss,
) -> Result<TrainSummary> {
    let setup = crate::cuda::GpuSetup {
        ordinal: Device::gpu_ordinal(gpu),
        config: run.config,
        timed: run.config.observe.records(),
    };
    let backend = crate::cuda::GpuBackend::open(setup, model, optimizer, run.comm, loss)?;
    run.steps(backend, position, data, loss)
}

#[cfg(not(feature = "cuda"))]
fn fit_on_gpu<M: DistributedModel>(
    _: Run,
    _: &mut M,
    _: ChosenOptimizer,
    _: Option<usize>,
    _: Position,
    _: &mut impl Dataset,
    _: &impl Loss,
) -> Result<TrainSummary> {
    Err(Error::CudaNotBuilt("`TrainConfig::device` cuda"))
}

impl Run<'_> {
    /// The loop, the same on every device.
    fn steps<M: DistributedModel>(
        self,
        mut backend: impl StepBackend<M>,
        mut position: Position,
        data: &mut impl Dataset,
        loss: &impl Loss,
    ) -> Result<TrainSummary> {
        let Run { comm, config, progress, about, stop, low_rank, mut held_out } = self;
        if let Some(restored) = &low_rank {
            restored.restore(backend.buckets_mut())?;
        }
        let (rank, world) = (comm.rank(), comm.world_size());
        let schedule = M::SCHEDULE;
        let activations = crate::memory::activation_bytes_of::<M>(config.batch, data.positions());
        let mut observer = Observer::start(&config.observe, config.run_shape(activations), comm, schedule.clone())?;
        if let Some(device) = backend.describe() {
            observer.say(&format!("training {} on {device} per rank", schedule.model));
        }
        let first_step = position.next_step;
        let global_batch = config.global_batch(world);
        progress.start(first_step, config.steps);
        let mut batch = Batch::default();
        let mut step_times = Vec::with_capacity(config.steps.saturating_sub(first_step).min(1 << 20) as usize);
        let mut log = LossLog::new(first_step);
        let positions = data.positions().max(1);
        for step in first_step..config.steps {
            fault::at_step(rank, step);
            trace::set_step(step);
            let started = Instant::now();
            if config.optimizer.lr_schedule != LrSchedule::Constant {
                backend.set_lr(config.optimizer.lr_schedule.lr(config.optimizer.base_lr(), step));
            }
            backend.begin_step(step)?;
            let step_span = trace::step();
            let logging = config.logs(first_step, step);
            let mut step_loss = 0.0f64;
            let (mut summed_loss, mut stop_vote) = (None, None);
            for micro in 0..config.accumulate {
                let first = shard_start_after(position.samples_seen, micro, world, rank, config.batch);
                data.fill(first, config.batch, &mut batch)?;
                batch.context = StepContext::sequences(config.batch, positions);
                if batch.rows() != batch.context.row_count() {
                    return Err(Error::Dataset(format!(
                        "asked for {} samples of {positions} position(s) from index {first}, the dataset filled {} rows",
                        config.batch,
                        batch.rows()
                    )));
                }
                step_loss += backend.forward_loss(&batch, loss, logging)?;
                let last = micro + 1 == config.accumulate;
                if logging && last {
                    // Queued before backward's launches, so that no reduction (nor the sharded
                    // state's all-gathers for the next forward) delays the log line.
                    summed_loss = Some(comm.start_sum_f64(step_loss / config.accumulate as f64)?);
                }
                if last && comm.gathers_in_forward() {
                    // The same for the stop vote, which otherwise waits for the step's end.
                    stop_vote = stop.map(|s| s.start_vote(comm)).transpose()?;
                }
                backend.backward(micro, last)?;
            }
            backend.step()?;
            drop(step_span);
            // `check` and `resume` leave room for the first step; 2^64 samples later, this.
            let samples_seen = position
                .samples_seen
                .checked_add(global_batch)
                .ok_or_else(|| Error::Dataset(format!("the data position passed 2^64 samples at step {}", step + 1)))?;
            position = Position { next_step: step + 1, samples_seen };
            step_times.push(started.elapsed());
            progress.advance();
            if let Some(summed) = summed_loss {
                let line = log.record(config, comm, step, summed, backend.grad_norm(), started)?;
                let note = observer.emulation_note();
                progress.suspend(&mut || observer.say(&format!("{line}{note}")));
            }
            let mut observed = Ok(());
            progress.suspend(&mut || observed = observer.after_step(step, comm));
            observed?;
            if let (true, Some(held_out)) = (config.validates_after(step), held_out.as_deref_mut()) {
                let value = validation::loss(&mut backend, held_out, loss, config, comm, &mut batch)?;
                log.validated(value);
                progress.suspend(&mut || observer.say(&format!("step {:>6}  validation loss {value:.4}", step + 1)));
            }
            let mut saved = None;
            // Every rank's PowerSGD errors go to rank 0 first (a collective: all ranks are here).
            let gathered =
                if config.saves_after(step) { checkpoint::low_rank::gather(&backend.buckets(), comm)? } else { None };
            if config.saves_after(step) {
                let joined = join_shards(&mut backend, comm)?;
                // Rank 0 writes (its failure kept, not returned yet: the others are waiting).
                let written = match (rank, &config.save) {
                    (0, Some(save)) => Some(write_checkpoint(&mut backend, save, position, &about, gathered, joined)),
                    _ => None,
                };
                // The other ranks wait for rank 0's write here, not in their next wait point,
                // whose timeout is about communication; then every rank learns how it went, so
                // that a failed write ends every rank at once, alike.
                comm.wait_for_checkpoint_write()?;
                saved = shared_outcome(comm, written)?;
                if let Some(written) = &saved {
                    progress.suspend(&mut || observer.say(&format!("checkpoint: {}", written.display())));
                }
            }
            // After the last step the run is done: a signal that came during it stops nothing.
            if step + 1 == config.steps {
                continue;
            }
            let vote = match stop_vote {
                Some(vote) => Some(vote),
                None => stop.map(|s| s.start_vote(comm)).transpose()?,
            };
            let voted = stop.zip(vote).map(|(s, vote)| s.agreed(comm, vote)).transpose()?;
            let Some(signal) = voted.flatten() else { continue };
            progress.finish();
            let unsaved = config.save.is_some() && !config.saves_after(step);
            let gathered = if unsaved { checkpoint::low_rank::gather(&backend.buckets(), comm)? } else { None };
            let joined = if unsaved { join_shards(&mut backend, comm)? } else { None };
            let written = match (rank, &config.save, &saved) {
                (0, Some(save), None) => Some(write_checkpoint(&mut backend, save, position, &about, gathered, joined)),
                _ => None,
            };
            backend.finish()?;
            comm.wait_for_checkpoint_write()?;
            if unsaved {
                saved = shared_outcome(comm, written)?;
            }
            let checkpoint = config.save.as_ref().map(|s| saved.unwrap_or_else(|| s.dir.clone()));
            return Err(Error::Stopped { signal, step: step + 1, checkpoint });
        }
        progress.finish();
        backend.finish()?;
        comm.barrier()?;
        let summary = TrainSummary::new(config, world, &log, step_times);
        let on = backend.describe().map(|d| format!(" on {d}")).unwrap_or_default();
        observer.say(&format!("{}{on}{}", summary.describe(comm.mode()), observer.emulation_note()));
        observer.finish(comm)?;
        Ok(summary)
    }
}
