//! One run of `Trainer::fit`: the step loop, the same on every device (`StepBackend`), with
//! its log lines, validation, checkpoints and the stop on a signal that every rank agrees on.

use std::path::PathBuf;
use std::time::Instant;

use super::prefetch::Prefetch;
use super::preflight::on_rank0;
use super::progress::{self, Progress};
use super::stop;
use super::summary::{LossLog, TrainSummary};
use super::validation::{self, HeldOutLoss};
use crate::backend::StepBackend;
use crate::checkpoint::{self, Position};
use crate::comm::Communicator;
use crate::config::{OptimizerKind, SaveConfig, TrainConfig};
use crate::data::{shard_start_after, Batch, Dataset};
use crate::error::{Error, Result};
use crate::fault;
use crate::layer::{DropoutDraw, StepContext};
use crate::loss::Loss;
use crate::model::DistributedModel;
use crate::observe::Observer;
use crate::optim::{ChosenOptimizer, LrSchedule};
use crate::trace;

/// Every rank's slices of the optimizer state, joined at rank 0 for a checkpoint, when the run
/// shards them (a collective: every rank is here); `None` otherwise and on the other ranks.
fn join_shards<M: DistributedModel>(
    backend: &mut impl StepBackend<M>,
    comm: &Communicator,
) -> Result<Option<checkpoint::shards::Joined>> {
    if !comm.shards_optimizer(&M::SCHEDULE) {
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
        Some(joined) => checkpoint::save_in_claimed(&save.dir, model, joined, position, about, low_rank.as_ref()),
        None => checkpoint::save_in_claimed(&save.dir, model, optimizer, position, about, low_rank.as_ref()),
    }
}

/// Rank 0's checkpoint write (`written`, `None` elsewhere) of the step before `position` into
/// `save`, shared: every rank returns rank 0's folder, or an error when the write failed (rank 0
/// its own), so that every rank stops alike.
fn shared_outcome(
    comm: &Communicator,
    written: Option<Result<PathBuf>>,
    save: Option<&SaveConfig>,
    position: Position,
) -> Result<Option<PathBuf>> {
    let mut ok = [u8::from(!matches!(written, Some(Err(_))))];
    comm.broadcast_bytes_from_root(&mut ok)?;
    match written {
        Some(result) => result.map(Some),
        None if ok[0] == 1 => Ok(save.map(|save| checkpoint::step_dir(&save.dir, position))),
        None => Err(Error::Checkpoint("rank 0 could not write the checkpoint (its message says why)".into())),
    }
}

/// The run `fit` is doing.
pub(super) struct Run<'r> {
    pub(super) comm: &'r Communicator,
    pub(super) config: &'r TrainConfig,
    /// Rank 0's display; `NoProgress` elsewhere.
    pub(super) progress: &'r dyn Progress,
    /// What the run reads, recorded in its checkpoints.
    pub(super) about: checkpoint::RunAbout,
    /// Listening for SIGTERM / SIGINT, when the run stops on them.
    pub(super) stop: Option<&'r stop::StopSignals>,
    /// This rank's PowerSGD state from the checkpoint resumed, for the buckets.
    pub(super) low_rank: Option<checkpoint::low_rank::Restored>,
    /// The held-out data, when the run validates.
    pub(super) held_out: Option<&'r mut dyn Dataset>,
    /// The checkpoint folder, on rank 0 when the run saves: the checkpoints it replaces go
    /// once every check has passed, right before the first step.
    pub(super) checkpoint_folder: Option<&'r mut checkpoint::DirLock>,
}

/// The run on a GPU: its backend, then the same loop.
#[cfg(feature = "cuda")]
pub(super) fn fit_on_gpu<M: DistributedModel>(
    run: Run,
    model: &mut M,
    optimizer: ChosenOptimizer,
    gpu: Option<usize>,
    position: Position,
    data: &mut impl Dataset,
    loss: &impl Loss,
) -> Result<TrainSummary> {
    let setup = crate::cuda::GpuSetup {
        ordinal: crate::config::Device::gpu_ordinal(gpu),
        config: run.config,
        timed: run.config.observe.records(),
    };
    let backend = crate::cuda::GpuBackend::open(setup, model, optimizer, run.comm, loss)?;
    run.steps(backend, position, data, loss)
}

#[cfg(not(feature = "cuda"))]
pub(super) fn fit_on_gpu<M: DistributedModel>(
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
    pub(super) fn steps<M: DistributedModel>(
        self,
        mut backend: impl StepBackend<M>,
        mut position: Position,
        data: &mut impl Dataset,
        loss: &impl Loss,
    ) -> Result<TrainSummary> {
        let Run { comm, config, progress, about, stop, low_rank, mut held_out, checkpoint_folder } = self;
        if let Some(restored) = &low_rank {
            restored.restore(backend.buckets_mut())?;
        }
        let (rank, world) = (comm.rank(), comm.world_size());
        let schedule = M::SCHEDULE;
        let activations = crate::memory::activation_bytes_of::<M>(config.batch, data.positions(), config.dropout.rate);
        let mut observer = Observer::start(&config.observe, config.run_shape(activations), comm, schedule.clone())?;
        if let Some(device) = backend.describe() {
            observer.say(&format!("training {} on {device} per rank", schedule.model));
        }
        on_rank0(comm, || checkpoint_folder.map_or(Ok(()), checkpoint::DirLock::replace_old))?;
        let first_step = position.next_step;
        let global_batch = config.global_batch(world);
        let mut shown = progress::Shown::start(progress, first_step, config.steps);
        let mut batch = Batch::default();
        let mut ahead = Prefetch::default();
        let mut step_times = Vec::with_capacity(config.steps.saturating_sub(first_step).min(1 << 20) as usize);
        let mut log = LossLog::new(first_step);
        let positions = data.positions().max(1);
        // A stop may end a step between its micro-steps, with nothing updated yet, except where the
        // buckets hold PowerSGD's error feedback, which those micro-steps' gradients are summed into:
        // such a step ends first.
        let stops_between_micro_steps =
            config.accumulate > 1 && backend.buckets().iter().all(|b| b.low_rank_state().is_none());
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
                fault::at_micro_step(rank, step, micro);
                let first = shard_start_after(position.samples_seen, micro, world, rank, config.batch);
                ahead.take_into(data, first, config.batch, &mut batch)?;
                batch.context = StepContext::sequences(config.batch, positions)
                    .with_dropout(dropout_of(config, first.saturating_mul(positions as u64)));
                batch.check_filled("the dataset", config.batch, first, data.features())?;
                let micro_loss = backend.forward_loss(&batch, loss, logging)?;
                if !micro_loss.is_finite() {
                    // Before backward: no rank sums a NaN gradient into every rank's parameters. (The
                    // GPU reads its loss back only on logging steps, and gives 0 on the others.)
                    let optimizer = &config.optimizer;
                    let zero_eps = if optimizer.kind == OptimizerKind::AdamW && optimizer.eps == 0.0 {
                        "; with `OptimizerConfig::eps` 0, AdamW divides 0 by 0 wherever a gradient element is exactly \
                         0 (as PyTorch's does): give a positive eps"
                    } else {
                        ""
                    };
                    // Clipping is advice only where it is off.
                    let remedies = match optimizer.clip_grad_norm {
                        None => "a smaller `OptimizerConfig::lr`, or `OptimizerConfig::clip_grad_norm`".to_string(),
                        Some(norm) => format!("a smaller `OptimizerConfig::lr`; gradients are clipped to norm {norm}"),
                    };
                    return Err(Error::Loss(format!(
                        "the loss is {micro_loss} at step {} on rank {rank}: the loss, the data or the parameters \
                         hold a non-finite value, or training diverged ({remedies}){zero_eps}",
                        step + 1
                    )));
                }
                step_loss += micro_loss;
                let last = micro + 1 == config.accumulate;
                // Between micro-steps nothing is updated yet: a stop there leaves the step out.
                let mid_step_vote = match stop {
                    Some(s) if !last && stops_between_micro_steps && step + 1 < config.steps => {
                        Some(s.start_vote(comm)?)
                    }
                    _ => None,
                };
                if logging && last {
                    // Queued before backward's launches, so that no reduction (nor the sharded
                    // state's all-gathers for the next forward) delays the log line.
                    summed_loss = Some(comm.start_sum_f64(step_loss / config.accumulate as f64)?);
                }
                if last && comm.gathers_in_forward(&M::SCHEDULE) {
                    // The same for the stop vote, which otherwise waits for the step's end.
                    stop_vote = stop.map(|s| s.start_vote(comm)).transpose()?;
                }
                backend.backward(micro, last)?;
                if let (Some(s), Some(vote)) = (stop, mid_step_vote) {
                    if let Some(signal) = s.agreed(comm, vote)? {
                        shown.finish();
                        drop(step_span);
                        if rank == 0 {
                            crate::process::console::err_line(&left_out(signal, step, micro, config.accumulate));
                        }
                        return Err(stopped(&mut backend, (comm, config, &about), position, None, signal)?);
                    }
                }
                if !last {
                    // The next micro-batch while the device runs this one's backward.
                    let next = shard_start_after(position.samples_seen, micro + 1, world, rank, config.batch);
                    ahead.fill_ahead(data, next, config.batch);
                }
            }
            // The next step's first micro-batch while the device runs this step's updates (none
            // after the run's last step).
            let next = position.samples_seen.checked_add(global_batch).filter(|_| step + 1 < config.steps);
            let next = next.map(|seen| shard_start_after(seen, 0, world, rank, config.batch));
            backend.step(&mut || {
                if let Some(next) = next {
                    ahead.fill_ahead(data, next, config.batch);
                }
            })?;
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
                let line = match validation::loss(&mut backend, held_out, loss, (config, stop), comm, &mut batch)? {
                    HeldOutLoss::Measured(value) => {
                        log.validated(value);
                        format!("step {:>6}  validation loss {value:.4}", step + 1)
                    }
                    HeldOutLoss::CutShort { done, of } => {
                        // An earlier step's value is not this one's: the summary reports none.
                        log.validation = None;
                        // A vote queued before backward (sharded state) missed the signal that
                        // cut the pass: the ranks vote again after it, and stop after this step.
                        if let Some(early) = stop_vote.take() {
                            comm.finish_sum(early)?;
                        }
                        format!("step {:>6}  validation cut short by a stop signal ({done} of {of} batches)", step + 1)
                    }
                };
                progress.suspend(&mut || observer.say(&line));
                observer.paused_after(step);
            }
            let mut saved = None;
            // Every rank's PowerSGD errors go to rank 0 first (a collective: all ranks are here).
            let gathered =
                if config.saves_after(step) { checkpoint::low_rank::gather(&backend.buckets(), comm)? } else { None };
            if config.saves_after(step) {
                observer.paused_after(step);
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
                saved = shared_outcome(comm, written, config.save.as_ref(), position)?;
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
            shown.finish();
            return Err(stopped(&mut backend, (comm, config, &about), position, saved, signal)?);
        }
        shown.finish();
        backend.finish()?;
        comm.barrier()?;
        let summary = TrainSummary::new(config, world, &log, step_times);
        let on = backend.describe().map(|d| format!(" on {d}")).unwrap_or_default();
        observer.say(&format!("{}{on}{}", summary.describe(comm.mode()), observer.emulation_note()));
        observer.finish(comm)?;
        Ok(summary)
    }
}

/// How a stop every rank agreed on ends the run at `position`, a step's end: with the
/// checkpoint of it that `saved` names, or that rank 0 writes now where the run saves (a write of
/// the checkpoint `latest` already names writes nothing), then `Error::Stopped`.
fn stopped<M: DistributedModel>(
    backend: &mut impl StepBackend<M>,
    (comm, config, about): (&Communicator, &TrainConfig, &checkpoint::RunAbout),
    position: Position,
    mut saved: Option<PathBuf>,
    signal: i32,
) -> Result<Error> {
    let unsaved = config.save.is_some() && saved.is_none();
    let gathered = if unsaved { checkpoint::low_rank::gather(&backend.buckets(), comm)? } else { None };
    let joined = if unsaved { join_shards(backend, comm)? } else { None };
    let written = match (comm.rank(), &config.save, unsaved) {
        (0, Some(save), true) => Some(write_checkpoint(backend, save, position, about, gathered, joined)),
        _ => None,
    };
    backend.finish()?;
    comm.wait_for_checkpoint_write()?;
    if unsaved {
        saved = shared_outcome(comm, written, config.save.as_ref(), position)?;
    }
    let checkpoint = config.save.as_ref().map(|s| saved.unwrap_or_else(|| s.dir.clone()));
    let unwritten = config.save_params.clone();
    Ok(Error::Stopped { signal, step: position.next_step, checkpoint, unwritten })
}

/// What rank 0 says when a stop comes between micro-steps `micro` and `micro + 1` (0-based) of
/// step `step` (0-based).
fn left_out(signal: i32, step: u64, micro: usize, accumulate: usize) -> String {
    let kept = if step == 0 { "the initial ones".to_string() } else { format!("those after step {step}") };
    format!(
        "note: {} came during step {}, after {} of its {accumulate} micro-steps: the step is left out (the \
         parameters are {kept}), and a resumed run does it whole",
        crate::error::signal_name(signal),
        step + 1,
        micro + 1,
    )
}

/// The dropout of a training micro-step whose first row is row `first_row` of the run (see
/// `DropoutDraw`), or none.
fn dropout_of(config: &TrainConfig, first_row: u64) -> DropoutDraw {
    let dropout = config.dropout;
    if dropout.rate > 0.0 {
        DropoutDraw::new(dropout.rate, dropout.seed, first_row)
    } else {
        DropoutDraw::NONE
    }
}
