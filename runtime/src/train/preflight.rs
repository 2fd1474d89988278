//! What a run checks before its first step: settings that cannot run, a dataset that does not
//! fit the model, memory it cannot have, output paths it cannot write, a checkpoint folder
//! another run holds; and where it starts (step 0, or a checkpoint).

use std::path::PathBuf;

use overlap_plan::Schedule;

use crate::checkpoint::{self, Position};
use crate::comm::{CommMode, Communicator};
use crate::config::{Device, TrainConfig};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::layer::DeviceOp;
use crate::memory::RunShape;
use crate::model::DistributedModel;
use crate::optim::{ChosenOptimizer, LrSchedule};
use crate::process::output_paths::{self, identity};

/// Settings that cannot run on `world` ranks, and a dataset that does not fit the model, refused
/// before anything starts.
pub(super) fn check<M: DistributedModel>(config: &TrainConfig, data: &impl Dataset, world: usize) -> Result<()> {
    let schedule = &M::SCHEDULE;
    let run =
        config.run_shape(crate::memory::activation_bytes_of::<M>(config.batch, data.positions(), config.dropout.rate));
    let zero = [
        ("`TrainConfig::steps`", config.steps == 0),
        ("`TrainConfig::batch`", config.batch == 0),
        ("`TrainConfig::accumulate`", config.accumulate == 0),
        ("`TrainConfig::threads`", config.threads == 0),
        ("`TrainConfig::log_every`", config.log_every == 0),
        ("`ObserveConfig::report_every`", config.observe.report_every == Some(0)),
    ];
    if let Some((name, _)) = zero.iter().find(|(_, is_zero)| *is_zero) {
        return Err(Error::Config(format!("{name} must be at least 1")));
    }
    if let Some(problem) = config.optimizer.lr_schedule.problem() {
        return Err(Error::Config(format!(
            "`OptimizerConfig::lr_schedule` {}: {problem}",
            config.optimizer.lr_schedule
        )));
    }
    if let (LrSchedule::WarmupCosine { min_lr, .. }, base) = (config.optimizer.lr_schedule, config.optimizer.base_lr())
    {
        if min_lr > base {
            return Err(Error::Config(format!(
                "`OptimizerConfig::lr_schedule` {}: its minimum rate {min_lr:e} is above the learning rate {base:e} \
                 (`OptimizerConfig::lr`), so the decay would raise the rate; give a minimum of at most the rate",
                config.optimizer.lr_schedule
            )));
        }
    }
    if let Some(problem) = config.optimizer.problem() {
        return Err(Error::Config(problem));
    }
    check_dropout::<M>(config)?;
    if config.save.as_ref().is_some_and(|s| s.every == Some(0)) {
        return Err(Error::Config("checkpoints every 0 steps: give a positive interval or none".into()));
    }
    if config.comm.mode == CommMode::Skip && world > 1 {
        let kept: Vec<&str> = [
            (config.save.is_some(), "`SaveConfig::dir`"),
            (config.save_params.is_some(), "`TrainConfig::save_params`"),
            // The held-out loss would average the losses of as many different models.
            (config.validation.is_some(), "a held-out loss (`TrainConfig::validation`)"),
        ]
        .into_iter()
        .filter_map(|(set, what)| set.then_some(what))
        .collect();
        if !kept.is_empty() {
            return Err(Error::Config(format!(
                "`CommConfig::mode` compute-only sums no gradients, so on {world} ranks each rank's parameters drift \
                 apart and none is the run's result: it has nothing to do with {}",
                kept.join(", ")
            )));
        }
    }
    // The data position counts samples in 64 bits: a step must not take more than that holds.
    let per_step = [config.batch, config.accumulate, world].iter().try_fold(1u64, |n, &f| n.checked_mul(f as u64));
    if per_step.is_none() {
        return Err(Error::Config(format!(
            "`TrainConfig::accumulate` {} with `TrainConfig::batch` {} on {world} rank(s) takes more samples per \
             step than a 64-bit \
             count holds",
            config.accumulate, config.batch
        )));
    }
    check_sharding(config, schedule)?;
    if config.device == Device::Cpu {
        check_memory(config, schedule, &run)?;
    } else if let Some(chosen) = schedule.grad_comm() {
        // Refused before the GPU is even opened: the same on machines without one.
        return Err(Error::GradCommOnGpu { model: schedule.model.to_string(), chosen });
    }
    check_recording(config, schedule, &run, world)?;
    let Some((features, _)) = schedule.io_widths() else {
        return Err(Error::Config(format!("{} has no layer with fixed widths", schedule.model)));
    };
    if data.features() != features {
        return Err(Error::Dataset(format!(
            "the data ({}) gives {} features per sample, {}'s first layer takes {features}",
            data.describe(),
            data.features(),
            schedule.model
        )));
    }
    Ok(())
}

/// A note before step 1 when an emulated link is so slow that even one bucket's all-reduce (a
/// sharded run's reduce-scatter) outlasts the wait timeout: the first wait that reaches it will
/// time out. (A note, not a refusal: a slow link is also how one sees a timeout's message.)
pub(super) fn link_outlasts_timeout(config: &TrainConfig, schedule: &Schedule, world: usize) -> Option<String> {
    let (link, timeout) = (config.comm.link?, config.comm.wait_timeout?);
    let largest = schedule.buckets.iter().enumerate().max_by_key(|(_, b)| b.numel);
    let (k, bucket) = largest.filter(|_| world > 1 && config.comm.mode != CommMode::Skip)?;
    let bytes = bucket.numel.saturating_mul(overlap_plan::ELEM_BYTES);
    // Sharded state waits for a reduce-scatter, then for an all-gather: each half an all-reduce.
    let (collective, seconds) = if config.comm.shard_optimizer.unwrap_or(schedule.shard_optimizer) {
        ("reduce-scatter", link.ring_reduce_scatter_seconds(bytes, world))
    } else {
        ("all-reduce", link.ring_all_reduce_seconds(bytes, world))
    };
    (seconds >= timeout.as_secs_f64()).then(|| {
        format!(
            "on the emulated link ({link}), the {collective} of bucket b{k} ({:.2} MiB) takes {seconds:.2} s over \
             {world} ranks, at least the wait timeout ({timeout:?}): its wait will time out",
            bytes as f64 / (1 << 20) as f64
        )
    })
}

/// A dropout rate in `[0, 1)`, and only for a model that has a layer to apply it: a `Dropout`, or
/// attention (which drops its weights).
fn check_dropout<M: DistributedModel>(config: &TrainConfig) -> Result<()> {
    let rate = config.dropout.rate;
    if !(0.0..1.0).contains(&rate) {
        return Err(Error::Config(format!(
            "`DropoutConfig::rate` {rate}: a dropout rate is at least 0 and below 1 (the share of activations dropped)"
        )));
    }
    let drops = |op: &DeviceOp| matches!(op, DeviceOp::Dropout | DeviceOp::CausalSelfAttention { .. });
    if rate > 0.0 && !M::DEVICE_OPS.iter().any(drops) {
        return Err(Error::Config(format!(
            "`DropoutConfig::rate` {rate}: {} has no `Dropout` layer nor attention, so nothing would be dropped",
            M::SCHEDULE.model
        )));
    }
    Ok(())
}

/// Refuses, before allocating anything, a run whose parameters, gradients, optimizer state and
/// activations cannot fit in the memory this machine has available (or in any address space).
fn check_memory(config: &TrainConfig, schedule: &Schedule, run: &RunShape) -> Result<()> {
    const GIB: f64 = (1u64 << 30) as f64;
    let needed = crate::memory::needed_bytes(schedule, run);
    let available = crate::memory::available_bytes();
    match (needed, available) {
        (None, _) => Err(Error::Config(format!(
            "{} with a batch of {} samples per rank needs more memory than any machine can address",
            schedule.model, config.batch
        ))),
        (Some(needed), Some(available)) if needed as u64 > available => Err(Error::Config(format!(
            "{} with a batch of {} samples per rank needs about {:.1} GiB per rank (parameters, gradients, \
             optimizer state, and {:.1} GiB of activations, which a smaller `TrainConfig::batch` reduces); this \
             machine has {:.1} GiB available",
            schedule.model,
            config.batch,
            needed as f64 / GIB,
            run.activation_bytes.unwrap_or(0) as f64 / GIB,
            available as f64 / GIB
        ))),
        _ => Ok(()),
    }
}

/// Refuses recording that rank 0 could not hold: one window of every rank's spans (a huge
/// `--report-every`, or `--accumulate`), or, with `--trace`, every span of the run.
pub fn check_recording(config: &TrainConfig, schedule: &Schedule, run: &RunShape, world: usize) -> Result<()> {
    if !config.observe.records() {
        return Ok(());
    }
    let needs = crate::observe::recording_bytes(&config.observe, schedule, run, world);
    let available = crate::memory::available_bytes();
    let beyond = |bytes: Option<u64>| match (bytes, available) {
        (None, _) => Some("more memory than any machine can address".to_string()),
        (Some(b), Some(a)) if b > a => {
            Some(format!("about {} at rank 0, and this machine has {} available", gib(b), gib(a)))
        }
        _ => None,
    };
    let per_step = needs.spans_per_step.map_or("more than 2^64".into(), |n| n.to_string());
    if let Some(why) = beyond(needs.window) {
        return Err(Error::Config(format!(
            "the report gathers the spans of {} step(s) at once from {world} rank(s) \
             (`ObserveConfig::report_every`; {per_step} spans per step with `TrainConfig::accumulate` {}): that \
             needs {why}; give a smaller `ObserveConfig::report_every`",
            needs.window_steps, config.accumulate
        )));
    }
    if let Some(why) = beyond(needs.trace) {
        return Err(Error::Config(format!(
            "`ObserveConfig::trace` keeps every span of the run at rank 0: {} steps of {per_step} spans from {world} rank(s) \
             need {why}; trace a shorter run",
            config.steps
        )));
    }
    Ok(())
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Runs `check` on rank 0 and makes every rank share its verdict, so that a refusal there ends
/// the run on every rank instead of leaving the others waiting in the first all-reduce.
pub fn on_rank0<T>(comm: &Communicator, check: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
    let outcome = (comm.rank() == 0).then(check);
    let mut ok = [u8::from(!matches!(outcome, Some(Err(_))))];
    comm.broadcast_bytes_from_root(&mut ok)?;
    match outcome {
        Some(result) => result.map(Some),
        None if ok[0] == 1 => Ok(None),
        None => Err(Error::Config("rank 0 refused to start (its message says why)".into())),
    }
}

/// The outputs' folders, held for the run: the checkpoint folder's lock (which removes the folder
/// again if the run ends having saved nothing there).
#[derive(Debug, Default)]
pub(super) struct ClaimedOutputs {
    pub checkpoint_folder: Option<checkpoint::DirLock>,
}

/// Every file and folder the run will write, checked before step 1, none of them one of the
/// `inputs` the data is read from; the checkpoint folder is claimed (locked, and refused if it
/// holds another run's checkpoints).
pub(super) fn claim_outputs(config: &TrainConfig, inputs: &[PathBuf]) -> Result<ClaimedOutputs> {
    let mut made = output_paths::MadeFolders::default();
    for (path, what) in config.output_files() {
        made.extend(output_paths::check_file(path, what)?);
    }
    crate::process::console::keep_stdout_for(config.output_files().map(|(path, _)| path));
    distinct_outputs(config, inputs)?;
    // The folders made to check the output files go again now, while they are empty: a rank that
    // MPI_Abort kills (another rank failed) cannot remove them later, and the file's writer makes
    // its folder when it writes (`write_atomically`).
    drop(made);
    let Some(save) = &config.save else { return Ok(ClaimedOutputs { checkpoint_folder: None }) };
    let continues = config.resume.as_deref().is_some_and(|r| identity(r) == identity(&save.dir));
    let lock = checkpoint::claim(&save.dir, continues, save.overwrite, config.steps)?;
    Ok(ClaimedOutputs { checkpoint_folder: Some(lock) })
}

/// Two outputs of one run never name the same file, none is a file the data is read from
/// (`inputs`), and none lies in a checkpoint folder (the one saved to, the one resumed from),
/// whose files are the checkpoints' own (`latest`, the step folders, the lock): refused before
/// step 1, when nothing is lost yet, rather than one result silently replacing another.
fn distinct_outputs(config: &TrainConfig, inputs: &[PathBuf]) -> Result<()> {
    let files: Vec<(PathBuf, &str)> = config.output_files().map(|(p, what)| (identity(p), what)).collect();
    let inputs: Vec<PathBuf> = inputs.iter().map(|p| identity(p)).collect();
    if let Some((path, what)) = config.output_files().find(|(p, _)| inputs.contains(&identity(p))) {
        return Err(Error::Config(format!(
            "{what} {} is a file the training data is read from: the run would write over it; give another file",
            path.display()
        )));
    }
    for (k, (path, what)) in files.iter().enumerate() {
        if let Some((_, other)) = files[..k].iter().find(|(p, _)| p == path) {
            return Err(Error::Config(format!(
                "{other} and {what} both name {}: one would replace the other; give each its own file",
                path.display()
            )));
        }
    }
    let folders = [
        config.save.as_ref().map(|s| (&s.dir, "`SaveConfig::dir`")),
        config.resume.as_ref().map(|dir| (dir, "`TrainConfig::resume`")),
    ];
    for (folder, setting) in folders.into_iter().flatten() {
        let folder = identity(folder);
        if let Some((path, what)) = files.iter().find(|(p, _)| p.starts_with(&folder)) {
            return Err(Error::Config(format!(
                "{what} {} is in the checkpoint folder {} ({setting}), whose files are the checkpoints' own: write \
                 it elsewhere",
                path.display(),
                folder.display()
            )));
        }
    }
    // Nor checkpoints inside another run's: that run's next save would remove them as its own
    // leftovers.
    if let Some(save) = &config.save {
        if let Some(folder) = checkpoint::owner_folder(&save.dir) {
            return Err(Error::Config(format!(
                "`SaveConfig::dir` {} is inside the checkpoint folder {}, whose files are its checkpoints' own (its \
                 next save would remove yours): save elsewhere",
                save.dir.display(),
                folder.display()
            )));
        }
    }
    // Nor over another run's checkpoint files: `--save-params ck/latest` would leave that run
    // unable to resume (other files beside them are no checkpoint's).
    for (path, what) in &files {
        if let Some(folder) = checkpoint::owner_folder(path) {
            return Err(Error::Config(format!(
                "{what} {} is one of the checkpoint folder {}'s own files: write it elsewhere",
                path.display(),
                folder.display()
            )));
        }
    }
    Ok(())
}

/// What differs between the run a checkpoint recorded and this one (`also_this_schedule`: the
/// fingerprint a checkpoint of this schedule may hold instead of `now`'s).
fn changes(saved: &checkpoint::RunAbout, now: &checkpoint::RunAbout, also_this_schedule: &str) -> Vec<String> {
    let mut changes = Vec::new();
    // The samples' hash where both runs have one; their descriptions (which name paths) otherwise.
    match (&saved.data_fingerprint, &now.data_fingerprint) {
        (Some(before), Some(after)) if before != after && saved.data == now.data => changes.push(format!(
            "other data: {} holds other samples than the checkpoint's run read (content hash {after}, was {before})",
            now.data
        )),
        (Some(before), Some(after)) if before != after => changes.push(format!(
            "other data: the checkpoint's run read {}, this one reads {} (content hash {after}, was {before})",
            saved.data, now.data
        )),
        (Some(_), Some(_)) => {}
        _ if saved.data != now.data => {
            changes.push(format!("other data: the checkpoint's run read {}, this one reads {}", saved.data, now.data))
        }
        _ => {}
    }
    if !saved.gradients.is_empty() && saved.gradients != now.gradients {
        changes
            .push(format!("gradients that travel otherwise: as {} before, as {} now", saved.gradients, now.gradients));
    }
    if !saved.schedule.is_empty() && saved.schedule != now.schedule && saved.schedule != also_this_schedule {
        changes.push(format!(
            "another compiled schedule (buckets, wire formats or PowerSGD rank): fingerprint {} before, {} now",
            saved.schedule, now.schedule
        ));
    }
    // By name: a build that records more settings, or in another order, compares what both have.
    let settings = |summary: &str| -> Vec<(String, String)> {
        summary.split("; ").filter_map(|item| item.split_once(": ")).map(|(k, v)| (k.into(), v.into())).collect()
    };
    let before = settings(&saved.optimizer);
    let changed: Vec<String> = settings(&now.optimizer)
        .into_iter()
        .filter_map(|(name, now)| {
            let (_, was) = before.iter().find(|(saved_name, _)| *saved_name == name)?;
            (*was != now).then(|| format!("{name}: {now} (was {was})"))
        })
        .collect();
    if !saved.optimizer.is_empty() && !changed.is_empty() {
        changes.push(format!("other optimizer settings: {} (its state is kept)", changed.join(", ")));
    }
    if saved.global_batch != now.global_batch {
        changes.push(format!(
            "another global batch: {} samples per step before, {} now (the data position is kept in samples)",
            saved.global_batch, now.global_batch
        ));
    }
    changes
}

/// Settings that sharded optimizer state cannot run with, refused by name. Each rank updates its
/// own slice of a bucket on the communication thread, with state for that slice alone (after the
/// step's global norm when it clips or checks the sums): nothing may send something else than
/// the sums (PowerSGD's factors).
fn check_sharding(config: &TrainConfig, schedule: &Schedule) -> Result<()> {
    if !config.comm.shard_optimizer.unwrap_or(schedule.shard_optimizer) {
        return Ok(());
    }
    let how = sharded_by(config, schedule);
    let low_rank = schedule.buckets.iter().find_map(|b| b.low_rank);
    // A run-time format sends such buckets whole, but through the same low-rank path.
    let whole = if config.comm.grad_comm.is_some() { ", even sent whole (`CommConfig::grad_comm`)" } else { "" };
    let conflicts = [low_rank
        .map(|r| format!("the model's `grad_comm = {r}`: PowerSGD's buckets cannot be reduce-scattered{whole}"))];
    let conflicts: Vec<String> = conflicts.into_iter().flatten().collect();
    if conflicts.is_empty() {
        return Ok(());
    }
    Err(Error::Config(format!(
        "{how} shards the optimizer state, which this run cannot do with {}; turn sharding off \
         (`CommConfig::shard_optimizer` false) or change them",
        conflicts.join("; ")
    )))
}

/// Who chose to shard the optimizer state: the run, or the model's attribute.
fn sharded_by(config: &TrainConfig, schedule: &Schedule) -> String {
    if config.comm.shard_optimizer.is_some() {
        "`CommConfig::shard_optimizer`".to_string()
    } else {
        format!("{}'s `#[distributed_model(shard_optimizer)]`", schedule.model)
    }
}

/// With sharded optimizer state every parameter travels with its bucket to be updated there,
/// which a layer allows by exposing its `Vec` (`Layer::param_vec_mut`); one that does not is
/// refused by name before the first step.
pub(super) fn check_lendable<M: DistributedModel>(
    config: &TrainConfig,
    comm: &Communicator,
    model: &mut M,
) -> Result<()> {
    let schedule = &M::SCHEDULE;
    // The GPU lends nothing: its updates run on the device after the wait points.
    if !comm.shards_optimizer(schedule) || config.device != Device::Cpu {
        return Ok(());
    }
    if comm.mode() == CommMode::Skip && comm.checks_finite() && comm.world_size() > 1 {
        // Its wait points check the whole gradients and update whole parameters, which a
        // rank's slice of the state does not cover.
        return Err(Error::Config(format!(
            "`CommConfig::check_finite` with `CommConfig::mode` compute-only is not supported on sharded optimizer \
             state ({}) on {} ranks: turn one of them off",
            sharded_by(config, schedule),
            comm.world_size()
        )));
    }
    let Some(p) = schedule.params().find(|&p| model.param_vec_mut(schedule.param(p).index).is_none()) else {
        return Ok(());
    };
    let layer = &schedule.layers[p.layer];
    Err(Error::Config(format!(
        "{} shards the optimizer state, which lends every parameter to its bucket's reduce-scatter, but `{}` \
         (layer `{}`, a {}) does not expose its `Vec` (`Layer::param_vec_mut`); implement it, or turn sharding off \
         (`CommConfig::shard_optimizer` false)",
        sharded_by(config, schedule),
        schedule.param_name(p),
        layer.name,
        layer.kind
    )))
}

/// Where training starts, and what a checkpoint brings besides parameters and optimizer state.
pub(super) struct Resumed {
    pub position: Position,
    /// This rank's PowerSGD state, if any, for the buckets.
    pub low_rank: Option<checkpoint::low_rank::Restored>,
    /// The vocabulary the checkpoint records, which the run's files keep where its data
    /// records none (token shards without `vocabulary.txt`): the ids still mean those characters.
    pub vocabulary: Option<String>,
}

/// Where training starts: step 0, or the newest checkpoint of `resume` (loaded into `model`
/// and `optimizer`; `steps_left` then checks it is before `steps`).
pub(super) fn resume<M: DistributedModel>(
    config: &TrainConfig,
    model: &mut M,
    optimizer: &mut ChosenOptimizer,
    (rank, world): (usize, usize),
    about: &checkpoint::RunAbout,
) -> Result<Resumed> {
    let mut position = Position { next_step: 0, samples_seen: 0 };
    let (mut low_rank, mut vocabulary) = (None, None);
    if let Some(dir) = &config.resume {
        let loaded = checkpoint::load(dir, model, optimizer, rank, world)?;
        low_rank = loaded.low_rank;
        position = loaded.position;
        if position.samples_seen.checked_add(about.global_batch).is_none() {
            return Err(Error::Checkpoint(format!(
                "{}: the data position, {} samples, leaves no room for a step of {} more: the file is damaged",
                loaded.state_file.display(),
                position.samples_seen,
                about.global_batch
            )));
        }
        vocabulary = loaded.run.as_ref().and_then(|r| r.vocabulary.clone());
        if let (Some(saved), Some(now)) = (vocabulary.as_deref(), about.vocabulary.as_deref()) {
            if let Some(why) = crate::text::vocabulary_mismatch(saved, now) {
                return Err(Error::Checkpoint(format!("{}: {why}", loaded.state_file.display())));
            }
        }
        // A checkpoint at the total already is refused once the ranks agree (`steps_left`).
        if rank == 0 && position.next_step < config.steps {
            crate::process::console::err_line(&format!(
                "resumed from {} at step {}",
                dir.display(),
                position.next_step
            ));
            // Checkpoints of sharded models written before `plan_fingerprint` recorded `fingerprint`.
            let recorded_before = format!("{:016x}", M::SCHEDULE.fingerprint());
            for change in loaded.run.map(|saved| changes(&saved, about, &recorded_before)).unwrap_or_default() {
                crate::process::console::err_line(&format!("warning: resuming with {change}"));
            }
        }
    }
    Ok(Resumed { position, low_rank, vocabulary })
}

/// Fails unless a step is left to run from `position` (checked once the ranks agree on it).
pub(super) fn steps_left(config: &TrainConfig, position: Position) -> Result<()> {
    if position.next_step >= config.steps {
        return Err(Error::Config(format!(
            "the checkpoint is at step {}, and {} steps is the total to reach: nothing to do (give a larger total to \
             train on; the parameters it holds are its step folder's {}, a safetensors file)",
            position.next_step,
            config.steps,
            crate::checkpoint::MODEL_FILE
        )));
    }
    Ok(())
}
