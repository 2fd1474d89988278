//! Checkpoints that lose nothing: `--save DIR` / `--resume DIR`.
//!
//! Layout of `DIR`:
//! - `step-00000010/model.safetensors`: the parameters under PyTorch's names and layouts
//!   (`fc1.weight` `[out, in]`, `fc1.bias`), so `safetensors.torch.load_file` gives a
//!   `state_dict` that `model.load_state_dict` takes directly;
//! - `step-00000010/optimizer.safetensors`: per-parameter optimizer state under PyTorch's state
//!   names, `momentum_buffer.fc1.weight` (SGD) or `exp_avg.fc1.weight` and
//!   `exp_avg_sq.fc1.weight` (AdamW);
//! - `step-00000010/state.json`: format version, model, optimizer kind and step count, the next
//!   step, the data position (samples consumed), and each file's size and CRC-32;
//! - `step-00000010/powersgd.safetensors`, for a model with `grad_comm = powersgd(..)`: every
//!   rank's error feedback and the warm-start Q (see `low_rank`);
//! - `latest`: the name of the newest complete step directory.
//!
//! Rank 0 writes a new step directory, syncs it, then replaces `latest` atomically (write,
//! sync, rename, sync the directory). A crash at any instant leaves `latest` naming either the
//! previous checkpoint or the new one, both complete. The two newest are kept.

mod claim;
mod durable;
mod latest;
mod layout;
mod lock;
pub mod low_rank;
pub mod shards;
mod state;
mod write;

pub use claim::{claim, DirLock};
pub use state::{Position, RunAbout};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fault::{self, SaveStage};
use crate::model::DistributedModel;
use crate::optim::OptimizerState;
use crate::params_file::{non_finite, read_checked};
use latest::{latest_name, step_state, StepState};
pub(crate) use layout::owner_folder;
use layout::{step_dir_name, step_of, LATEST, OPTIMIZER_FILE, REPLACED, STATE_FILE};
use state::State;
use write::write_step;

pub(crate) use crate::params_file::MODEL_FILE;
/// Step directories kept: the newest and the one before it.
const KEEP: usize = 2;

/// What `load` restored besides the tensors.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// Where the saved run stopped: the next step to run and the samples consumed.
    pub position: Position,
    /// What the saved run read, when the checkpoint records it.
    pub run: Option<RunAbout>,
    /// The state file it was read from, for messages about what it holds.
    pub state_file: PathBuf,
    /// This rank's PowerSGD state, for the buckets (`Restored::restore`), when the model and the
    /// checkpoint have one.
    pub low_rank: Option<low_rank::Restored>,
}

/// The folder in `dir` that the checkpoint of `position` is published as.
pub fn step_dir(dir: &Path, position: Position) -> PathBuf {
    dir.join(step_dir_name(position.next_step))
}

/// Writes a checkpoint of `model` and `optimizer` at `position` into `dir` (rank 0 only), with
/// every rank's PowerSGD state when the model has one (`low_rank::gather`). Returns the step
/// directory. A position that is already `dir`'s latest checkpoint is kept, not written again
/// (a stop right after a periodic save); one before it is refused: publishing it would remove
/// the newer checkpoints as the leftovers of an unfinished save. Without a readable `latest`, the
/// newest whole step folder stands for it.
pub fn save<M: DistributedModel, O: OptimizerState>(
    dir: impl AsRef<Path>,
    model: &M,
    optimizer: &O,
    position: Position,
    run: &RunAbout,
    low_rank: Option<&low_rank::Gathered>,
) -> Result<PathBuf> {
    let dir = dir.as_ref();
    crate::params_file::check_parameters_home(model)?;
    let _held = lock::hold_for_save(dir)?;
    let latest = latest_name(dir);
    if latest.is_err() && layout::set_aside(dir).is_some() {
        return Err(Error::Checkpoint(format!(
            "{}: holds no checkpoint of its own{}; a save here would replace them",
            dir.display(),
            latest::set_aside_note(dir)
        )));
    }
    let newest = match latest {
        Ok(name) => step_of(&name).map(|step| (step, "latest checkpoint")),
        Err(_) => latest::whole_steps(dir)
            .last()
            .and_then(|name| step_of(name))
            .map(|step| (step, "newest whole step folder")),
    };
    if let Some((newest, what)) = newest {
        if newest > position.next_step {
            return Err(Error::Checkpoint(format!(
                "{}: its {what} is of step {newest}, after this one's step {}: publishing this one would remove the \
                 newer ones as an unfinished save's; save into another folder",
                dir.display(),
                position.next_step
            )));
        }
    }
    publish(dir, model, optimizer, position, run, low_rank, || false)
}

/// `save` into a folder the `Trainer` claimed: one whose checkpoints it may replace
/// (`SaveConfig::overwrite`), so an older position than `latest`'s is published too, and those
/// it set aside to replace them (`claim::DirLock::replace_old`) are replaced once it is.
pub(crate) fn save_in_claimed<M: DistributedModel, O: OptimizerState>(
    dir: &Path,
    model: &M,
    optimizer: &O,
    position: Position,
    run: &RunAbout,
    low_rank: Option<&low_rank::Gathered>,
) -> Result<PathBuf> {
    // The run was told to replace them: a disk without room for both gives them up first, as
    // it would have before step 1 (the step trained is not lost for them).
    let make_room = || layout::set_aside(dir).is_some() && std::fs::remove_dir_all(dir.join(REPLACED)).is_ok();
    let published = publish(dir, model, optimizer, position, run, low_rank, make_room)?;
    let _ = std::fs::remove_dir_all(dir.join(REPLACED));
    Ok(published)
}

/// Writes the checkpoint of `position` into `dir` and publishes it as `latest`, whole or not at
/// all; then removes the step folders it makes obsolete (`remove_old`). A disk found full is
/// tried once more if `make_room` made some.
fn publish<M: DistributedModel, O: OptimizerState>(
    dir: &Path,
    model: &M,
    optimizer: &O,
    position: Position,
    run: &RunAbout,
    low_rank: Option<&low_rank::Gathered>,
    make_room: impl FnOnce() -> bool,
) -> Result<PathBuf> {
    let nth = fault::next_save();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let name = step_dir_name(position.next_step);
    let step_dir = step_dir(dir, position);
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    if latest_name(dir).ok().as_deref() == Some(name.as_str()) {
        return Ok(step_dir); // This very state is already the published checkpoint.
    }
    if step_dir.exists() {
        std::fs::remove_dir_all(&step_dir).map_err(io(&step_dir))?; // Left by an interrupted save.
    }
    std::fs::create_dir(&step_dir).map_err(io(&step_dir))?;
    // A save that fails leaves no part of a step folder: `latest` still names the previous one.
    let mut written = write_step(&step_dir, model, optimizer, position, run, low_rank, nth);
    if written.as_ref().is_err_and(is_disk_full) && make_room() {
        std::fs::remove_dir_all(&step_dir).and_then(|()| std::fs::create_dir(&step_dir)).map_err(io(&step_dir))?;
        written = write_step(&step_dir, model, optimizer, position, run, low_rank, fault::next_save());
    }
    written.map_err(|e| unpublished(e, dir, &step_dir))?;
    let published = durable::sync_dir(dir).and_then(|()| {
        fault::at_save_stage(SaveStage::Synced, nth);
        durable::replace_atomically(&dir.join(LATEST), name.as_bytes(), |step| {
            fault::at_save_stage(
                match step {
                    durable::Step::TemporaryWritten => SaveStage::PointerWritten,
                    durable::Step::Renamed => SaveStage::Renamed,
                },
                nth,
            )
        })
    });
    if let Err(error) = published {
        if latest_name(dir).ok().as_deref() == Some(name.as_str()) {
            return Err(error); // Published: only the last sync failed.
        }
        // Not published: no checkpoint, so no disk kept for it.
        let _ = std::fs::remove_file(durable::temporary(&dir.join(LATEST)));
        return Err(unpublished(error, dir, &step_dir));
    }
    remove_old(dir, &name);
    Ok(step_dir)
}

/// Removes the folder of a save that was not published (`step_dir`, in `dir`), and returns its
/// `error` with what the folder holds now: the checkpoint `latest` names, as it was.
fn unpublished(error: Error, dir: &Path, step_dir: &Path) -> Error {
    let removed = match std::fs::remove_dir_all(step_dir) {
        Ok(()) => "nothing of this save is kept".to_string(),
        Err(e) => format!("its partial folder {} could not be removed ({e}): remove it", step_dir.display()),
    };
    let kept = match layout::read_latest(dir) {
        Ok(name) => format!("{} still names {name}, as it did", dir.join(LATEST).display()),
        Err(_) if layout::set_aside(dir).is_some() => format!(
            "the checkpoints this run replaces wait in {}, put back if it ends before a save",
            dir.join(REPLACED).display()
        ),
        Err(_) if !dir.join(LATEST).exists() => "the folder holds no earlier checkpoint".to_string(),
        Err(problem) => format!("its earlier checkpoints are as they were ({problem})"),
    };
    let room = if is_disk_full(&error) {
        format!(" (a save needs room for one checkpoint beside the {KEEP} it keeps)")
    } else {
        String::new()
    };
    Error::Checkpoint(format!("{}; {removed}, and {kept}{room}", without_prefix(&error)))
}

/// Whether `error` is a write that found the disk full.
fn is_disk_full(error: &Error) -> bool {
    matches!(error, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC))
}

/// A checkpoint error's message without its `checkpoint: `, to build another one around it.
fn without_prefix(error: &Error) -> String {
    let message = error.to_string();
    message.strip_prefix("checkpoint: ").map_or(message.clone(), str::to_string)
}

/// The vocabulary the newest checkpoint in `dir` records (`RunAbout::vocabulary`), read before a
/// resume (for a sample's characters); `None` when it records none or cannot be read, which the
/// resume itself then reports.
pub fn recorded_vocabulary(dir: &Path) -> Option<String> {
    let name = latest_name(dir).ok()?;
    let state = State::read(&dir.join(name).join(STATE_FILE)).ok()?;
    state.run?.vocabulary
}

/// The step folder `dir`'s `latest` names, or why there is none: the error `load` gives.
pub fn latest_step_dir(dir: &Path) -> Result<PathBuf> {
    Ok(dir.join(latest_name(dir)?))
}

/// The parameters file of the newest checkpoint in `dir`, where it is there: what
/// `--init-params` (`params_file::load_into`) reads to start from, or sample from, a checkpoint
/// without resuming it.
pub fn latest_model_file(dir: &Path) -> Option<PathBuf> {
    let file = dir.join(latest_name(dir).ok()?).join(MODEL_FILE);
    file.is_file().then_some(file)
}

/// Restores `model` and `optimizer` from the newest checkpoint in `dir` and says where training
/// stands; returns rank `rank`'s PowerSGD state (of `world` ranks) for the buckets. Any
/// difference between the checkpoint and this model, optimizer or world size is an error that
/// lists every difference.
pub fn load<M: DistributedModel, O: OptimizerState>(
    dir: impl AsRef<Path>,
    model: &mut M,
    optimizer: &mut O,
    rank: usize,
    world: usize,
) -> Result<Loaded> {
    let dir = dir.as_ref();
    if rank >= world {
        return Err(Error::Config(format!("checkpoint::load as rank {rank} of {world}: ranks are numbered from 0")));
    }
    let name = latest_name(dir)?;
    let step_dir = dir.join(&name);
    if !step_dir.is_dir() {
        return Err(Error::Checkpoint(format!(
            "{}: `latest` names {name}, which is missing (the folder was damaged, or copied in part){}",
            dir.display(),
            latest::other_whole_steps(dir, Some(&name))
        )));
    }
    let state_path = step_dir.join(STATE_FILE);
    // A damaged newest checkpoint says which older ones can be resumed instead.
    let damaged = |e: Error| match e {
        Error::Checkpoint(_) | Error::Io { .. } => {
            Error::Checkpoint(format!("{}{}", without_prefix(&e), latest::other_whole_steps(dir, Some(&name))))
        }
        other => other,
    };
    let state = State::read(&state_path).map_err(damaged)?;
    let checked = |file: &str| state.checked_file(&step_dir, file, &state_path).map_err(damaged);
    let (model_bytes, optimizer_bytes) = (checked(MODEL_FILE)?, checked(OPTIMIZER_FILE)?);

    let mut problems = Vec::new();
    if state.model != M::SCHEDULE.model {
        problems.push(format!("this is a checkpoint of `{}`; this run trains `{}`", state.model, M::SCHEDULE.model));
    }
    if state.optimizer != optimizer.kind() {
        problems.push(format!(
            "{}: optimizer `{}`, this run uses `{}`",
            state_path.display(),
            state.optimizer,
            optimizer.kind()
        ));
    }
    let model_shapes: BTreeMap<String, Vec<usize>> =
        M::SCHEDULE.params().map(|p| (M::SCHEDULE.param_name(p), M::SCHEDULE.param(p).shape.to_vec())).collect();
    let params = read_checked(&model_bytes, &model_shapes, |_| true)
        .map_err(|p| problems.extend(p.into_iter().map(|p| format!("{}: {p}", step_dir.join(MODEL_FILE).display()))))
        .ok();
    let state_shapes: BTreeMap<String, Vec<usize>> = optimizer
        .buffer_names()
        .iter()
        .flat_map(|b| model_shapes.iter().map(move |(name, shape)| (format!("{b}.{name}"), shape.clone())))
        .collect();
    // Another optimizer's buffers cannot fit: the line above says why, once, not per tensor.
    let buffers = (state.optimizer == optimizer.kind())
        .then(|| {
            read_checked(&optimizer_bytes, &state_shapes, |_| false)
                .map_err(|p| {
                    problems.extend(p.into_iter().map(|p| format!("{}: {p}", step_dir.join(OPTIMIZER_FILE).display())))
                })
                .ok()
        })
        .flatten();
    // PowerSGD's state, when both the model and the checkpoint have one.
    let compresses = M::SCHEDULE.buckets.iter().any(|b| b.low_rank.is_some());
    if let (Some(meta), false) = (state.powersgd, compresses) {
        let compiled = state.run.as_ref().map_or(String::new(), |r| format!(" ({})", r.gradients));
        problems.push(format!(
            "{}: PowerSGD's error feedback of {} rank(s){compiled}, which this model, compiled without PowerSGD, would \
             drop: resume with the model compiled with `grad_comm = powersgd(..)`",
            step_dir.join(low_rank::FILE).display(),
            meta.ranks
        ));
    }
    let mut low_rank = None;
    if let (Some(meta), true) = (state.powersgd, compresses) {
        let path = step_dir.join(low_rank::FILE);
        if meta.ranks != world {
            problems.push(format!(
                "{}: PowerSGD's error feedback of {} rank(s); this run has {world}: resume on {} rank(s)",
                path.display(),
                meta.ranks,
                meta.ranks
            ));
        } else {
            let bytes = checked(low_rank::FILE)?;
            match read_checked(&bytes, &low_rank::expected(&M::SCHEDULE, meta.ranks), |_| true) {
                Ok(values) => {
                    let values = values.into_iter().map(|(name, bytes)| (name, crate::params_file::f32_values(bytes)));
                    low_rank = Some(low_rank::restored(path.clone(), meta, values.collect(), rank));
                }
                Err(p) => problems.extend(p.into_iter().map(|p| format!("{}: {p}", path.display()))),
            }
        }
    }
    if let Some(step) = state.optimizer_step.filter(|&step| step > state.position.next_step) {
        problems.push(format!(
            "{}: the optimizer stepped {step} times in {} steps: more often than the run did (edited or damaged)",
            state_path.display(),
            state.position.next_step
        ));
    }
    if let (Some(params), Some(buffers)) = (&params, &buffers) {
        let in_file = |file: &str, problems: Vec<String>| {
            let path = step_dir.join(file);
            problems.into_iter().map(move |p| format!("{}: {p}", path.display()))
        };
        // (The optimizer's state may hold infinities a run reached and went on from: AdamW's
        // second moment of a gradient past f32's square root; its update is then 0.)
        problems.extend(in_file(MODEL_FILE, non_finite(params, "a parameter")));
        let stepped = state.optimizer_step.is_some_and(|step| step > 0);
        problems.extend(in_file(OPTIMIZER_FILE, missing_buffers::<M>(optimizer.buffer_names(), buffers, stepped)));
    }
    let (Some(params), Some(buffers), true) = (params, buffers, problems.is_empty()) else {
        return Err(Error::CheckpointMismatch { path: step_dir, problems });
    };

    // Every check passed: nothing is changed before. Decoded from the files' bytes straight into
    // the parameters, and one parameter's optimizer buffers at a time: a resumed run holds the
    // files beside its training state, not also a decoded copy of them.
    for (i, p) in M::SCHEDULE.params().enumerate() {
        let name = M::SCHEDULE.param_name(p);
        crate::params_file::decode_into(model.param_mut(p), params[&name]);
        let mine: Vec<Vec<f32>> = optimizer
            .buffer_names()
            .iter()
            .filter_map(|b| buffers.get(&format!("{b}.{name}")).map(|bytes| crate::params_file::f32_values(bytes)))
            .collect();
        if !mine.is_empty() {
            optimizer.set_buffers(i, &mine.iter().map(Vec::as_slice).collect::<Vec<_>>());
        }
    }
    if let Some(step) = state.optimizer_step {
        optimizer.set_step_count(step);
    }
    Ok(Loaded { position: state.position, run: state.run, state_file: state_path, low_rank })
}

/// The optimizer buffers `buffers` lacks, each parameter's once: a parameter has all of them or
/// (before the optimizer's first step, `stepped` false) none; an optimizer that has stepped
/// keeps them for every parameter, as PyTorch's does for every parameter with a gradient.
fn missing_buffers<M: DistributedModel>(
    names: &[&str],
    buffers: &BTreeMap<String, &[u8]>,
    stepped: bool,
) -> Vec<String> {
    let s = M::SCHEDULE;
    let mut problems = Vec::new();
    for name in s.params().map(|p| s.param_name(p)) {
        let (found, lacking): (Vec<&str>, Vec<&str>) =
            names.iter().partition(|b| buffers.contains_key(&format!("{b}.{name}")));
        if !lacking.is_empty() && (stepped || !found.is_empty()) {
            let lacking: Vec<String> = lacking.iter().map(|b| format!("`{b}.{name}`")).collect();
            let why = if stepped {
                "the optimizer has stepped: every parameter has its state"
            } else {
                "a parameter has all of its state or none"
            };
            problems.push(format!("the optimizer's state lacks {} ({why})", lacking.join(" and ")));
        }
    }
    problems
}

/// Deletes step directories older than the `KEEP` newest checkpoints, and the partial ones a
/// crash during a save left: any newer than `newest`, and older ones without a whole state file
/// (a stop between periodic saves publishes a step of its own, so a partial one can be older
/// than the next save). Best effort: a leftover costs disk, not correctness, so an older folder
/// whose state file cannot be read (permissions, an I/O error) is left alone; a newer one is an
/// unfinished save's whatever it holds.
fn remove_old(dir: &Path, newest: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let Some(newest) = step_of(newest) else { return };
    let mut steps: Vec<(u64, String)> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| Some((step_of(&name)?, name)))
        .collect();
    steps.sort();
    while steps.last().is_some_and(|(n, _)| *n > newest) {
        let (_, partial) = steps.pop().expect("checked");
        let _ = std::fs::remove_dir_all(dir.join(partial));
    }
    // An unreadable one is neither removed nor counted among the newest it would displace.
    steps.retain(|(step, name)| {
        *step == newest
            || match step_state(&dir.join(name)) {
                StepState::Whole => true,
                StepState::Partial => {
                    let _ = std::fs::remove_dir_all(dir.join(name));
                    false
                }
                StepState::Unreadable => false,
            }
    });
    let excess = steps.len().saturating_sub(KEEP);
    for (_, old) in &steps[..excess] {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
}
