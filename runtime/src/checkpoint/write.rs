//! Writing one checkpoint's files: the model, the optimizer state (and PowerSGD's), each written
//! from the values themselves as it goes, its size and CRC kept for the state file written last;
//! the fault harness's stages between them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use super::durable;
use super::layout::{OPTIMIZER_FILE, STATE_FILE};
use super::low_rank;
use super::state::{self, state_crc, Position, RunAbout, State, Summing};
use crate::error::{Error, Result};
use crate::fault::{self, SaveStage};
use crate::model::DistributedModel;
use crate::optim::OptimizerState;
use crate::params_file::{check_notes, write_model_file, MODEL_FILE};
use crate::tensor_file::{self, Tensor};

/// The files of the checkpoint at `step_dir`, written and synced with the folder.
pub(super) fn write_step<M: DistributedModel, O: OptimizerState>(
    step_dir: &Path,
    model: &M,
    optimizer: &O,
    position: Position,
    run: &RunAbout,
    low_rank: Option<&low_rank::Gathered>,
    nth: u64,
) -> Result<()> {
    let notes = run.file_notes();
    check_notes(&notes).map_err(Error::Checkpoint)?;
    // Each file is written from the values themselves as it goes, its size and CRC kept for the
    // state file; a copy of the model and optimizer state in memory would need as much again.
    let mut files = BTreeMap::new();
    let mut written = Vec::new();
    let mut save_file = |file: &str, stage, write: &dyn Fn(&mut dyn Write) -> std::io::Result<()>| {
        let path = step_dir.join(file);
        let mut check = None;
        let opened = durable::write_new_with(&path, |out| {
            let mut summing = Summing::new(out);
            write(&mut summing)?;
            check = Some(summing.check());
            Ok(())
        })?;
        files.insert(file.to_string(), check.expect("set by the write that succeeded"));
        written.push((opened, path.clone()));
        after_stage(stage, nth, &path)
    };
    save_file(MODEL_FILE, SaveStage::ModelWritten, &|out| write_model_file(out, model, &notes))?;
    let optimizer_tensors = optimizer_tensors::<M, O>(optimizer);
    save_file(OPTIMIZER_FILE, SaveStage::OptimizerWritten, &|out| tensor_file::write(out, &optimizer_tensors, None))?;
    if let Some(gathered) = low_rank {
        let write = |out: &mut dyn Write| tensor_file::write(out, &gathered.tensors, None);
        save_file(low_rank::FILE, SaveStage::OptimizerWritten, &write)?;
    }
    let state = State {
        format: state::FORMAT.into(),
        model: M::SCHEDULE.model.to_string(),
        optimizer: optimizer.kind().into(),
        optimizer_step: optimizer.step_count(),
        position,
        run: Some(run.clone()),
        powersgd: low_rank.map(|g| g.meta),
        files,
        crc32: None,
    };
    let state = State { crc32: Some(state_crc(&state)?), ..state };
    let state_bytes = serde_json::to_vec_pretty(&state).map_err(|e| Error::Checkpoint(e.to_string()))?;
    let path = step_dir.join(STATE_FILE);
    written.push((durable::write_new(&path, &state_bytes)?, path.clone()));
    after_stage(SaveStage::StateWritten, nth, &path)?;
    for (file, path) in &written {
        durable::sync(file, path)?;
    }
    durable::sync_dir(step_dir)?;
    Ok(())
}

/// The fault harness's stop or error after a save's stage (nothing outside its tests).
fn after_stage(stage: SaveStage, nth: u64, path: &Path) -> Result<()> {
    if let Some(source) = fault::save_error(stage, nth) {
        return Err(Error::Io { path: path.to_path_buf(), source });
    }
    fault::at_save_stage(stage, nth);
    Ok(())
}

/// The optimizer's state of every parameter, borrowed from the optimizer.
fn optimizer_tensors<M: DistributedModel, O: OptimizerState>(optimizer: &O) -> Vec<Tensor<'_>> {
    let s = M::SCHEDULE;
    let mut out = Vec::new();
    for (i, p) in s.params().enumerate() {
        if let Some(buffers) = optimizer.buffers(i) {
            for (b, values) in optimizer.buffer_names().iter().zip(buffers) {
                out.push(Tensor::new(format!("{b}.{}", s.param_name(p)), s.param(p).shape.to_vec(), values));
            }
        }
    }
    out
}
