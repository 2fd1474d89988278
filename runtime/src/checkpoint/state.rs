//! `state.json`: what a checkpoint holds besides tensors (where training stands, what the run
//! read, each file's size and CRC-32), itself signed with a CRC-32 so that an edited position or
//! file record is found, not resumed from.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::low_rank;
use crate::error::{Error, Result};

pub(super) const FORMAT: &str = "overlap-checkpoint/1";

/// Where training stands: what a resumed run needs besides tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The next step to run (0-based), i.e. steps completed.
    pub next_step: u64,
    /// Samples consumed by all ranks together: where the data stream continues.
    pub samples_seen: u64,
}

/// What a checkpoint's run read, so that a resume can say when it reads something else.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAbout {
    /// Samples per optimizer step over all ranks.
    pub global_batch: u64,
    /// The dataset's own description (`Dataset::describe`), seed included for generated sets;
    /// empty where the run recorded none (a loop of one's own may not), and then not compared.
    pub data: String,
    /// A hash of the training samples themselves (`Dataset::fingerprint`), as 16 hex digits:
    /// the same data found at another path is the same, other samples under the same name are
    /// not. Absent for data without a fingerprint and in checkpoints written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_fingerprint: Option<String>,
    /// How gradients travelled: the compiled `grad_comm` (`fp32`, `bf16`,
    /// `powersgd(rank = 4, start_iter = 10)`), or a format chosen at run time. Empty in
    /// checkpoints written before it was recorded.
    #[serde(default)]
    pub gradients: String,
    /// The compiled schedule's fingerprint (its buckets, wire formats and PowerSGD rank; not its
    /// `shard_optimizer`, whose checkpoints are the same: `Schedule::plan_fingerprint`), as 16 hex
    /// digits; empty in checkpoints written before it was recorded.
    #[serde(default)]
    pub schedule: String,
    /// The optimizer's settings (`OptimizerConfig::summary`); empty in checkpoints written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub optimizer: String,
    /// What the data's token ids stand for (`Dataset::vocabulary`): a text's sorted characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocabulary: Option<String>,
    /// The positions of each training sequence (`Dataset::positions`) where a sample is a
    /// sequence; absent for other data and in checkpoints written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub positions: Option<usize>,
    /// The dropout the run trained with (`rate 0.2, seed 1337`, or `off`): the masks a step
    /// draws follow from it. Empty in checkpoints written before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dropout: String,
}

impl RunAbout {
    /// What the run's parameters files record beside the tensors: `--save-params`' and each
    /// checkpoint's model file.
    pub(crate) fn file_notes(&self) -> crate::params_file::FileNotes {
        crate::params_file::FileNotes { vocabulary: self.vocabulary.clone(), positions: self.positions }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct State {
    pub(super) format: String,
    pub(super) model: String,
    pub(super) optimizer: String,
    pub(super) optimizer_step: Option<u64>,
    pub(super) position: Position,
    /// Absent in checkpoints written before it was recorded.
    #[serde(default)]
    pub(super) run: Option<RunAbout>,
    /// Present when the checkpoint holds PowerSGD's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) powersgd: Option<low_rank::Meta>,
    pub(super) files: BTreeMap<String, FileCheck>,
    /// CRC-32 of everything above (`state_crc`), so that an edited position, step count or file
    /// record is found, not resumed from. Absent in checkpoints written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) crc32: Option<u32>,
}

/// The CRC-32 of `state` without its own `crc32`: of its fields as compact JSON with sorted keys,
/// so that the file's layout (indentation, key order) does not matter, only what it says.
pub(super) fn state_crc(state: &State) -> Result<u32> {
    value_crc(serde_json::to_value(state).map_err(|e| Error::Checkpoint(e.to_string()))?)
}

/// The CRC of a state file's fields as read, whichever this build knows: a field added since
/// the file was written, absent there, does not change what is checked.
fn value_crc(mut value: serde_json::Value) -> Result<u32> {
    if let Some(fields) = value.as_object_mut() {
        fields.remove("crc32");
    }
    let compact = serde_json::to_vec(&value).map_err(|e| Error::Checkpoint(e.to_string()))?;
    Ok(crc32fast::hash(&compact))
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct FileCheck {
    bytes: u64,
    crc32: u32,
}

impl FileCheck {
    pub(super) fn of(bytes: &[u8]) -> Self {
        FileCheck { bytes: bytes.len() as u64, crc32: crc32fast::hash(bytes) }
    }
}

/// A writer that passes its bytes on and keeps their `FileCheck`, for a file written as it is
/// made.
pub(super) struct Summing<W: Write> {
    inner: W,
    crc32: crc32fast::Hasher,
    bytes: u64,
}

impl<W: Write> Summing<W> {
    pub(super) fn new(inner: W) -> Self {
        Summing { inner, crc32: crc32fast::Hasher::new(), bytes: 0 }
    }

    /// The check of every byte written so far.
    pub(super) fn check(self) -> FileCheck {
        FileCheck { bytes: self.bytes, crc32: self.crc32.finalize() }
    }
}

impl<W: Write> Write for Summing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc32.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl State {
    /// The state file at `path`: parsed, of this format, and its CRC (when recorded) intact.
    pub(super) fn read(path: &Path) -> Result<State> {
        let bytes = read(path)?;
        let state: State = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Checkpoint(format!("{}: not a valid checkpoint state file: {e}", path.display())))?;
        if state.format != FORMAT {
            return Err(Error::Checkpoint(format!(
                "{}: format `{}`, this build reads `{FORMAT}`",
                path.display(),
                state.format
            )));
        }
        if let Some(recorded) = state.crc32 {
            let read = serde_json::from_slice(&bytes).map_err(|e| Error::Checkpoint(e.to_string()))?;
            let found = value_crc(read)?;
            if found != recorded {
                return Err(Error::Checkpoint(format!(
                    "{}: edited or damaged: what it says has CRC-32 {found:08x}, the checkpoint recorded {recorded:08x} \
                     (its position, step count and file records cannot be trusted)",
                    path.display()
                )));
            }
        }
        Ok(state)
    }

    /// The bytes of `file` in `step_dir`, which this state (read from `state_path`) must list
    /// with their size and CRC.
    pub(super) fn checked_file(&self, step_dir: &Path, file: &str, state_path: &Path) -> Result<Vec<u8>> {
        let path = step_dir.join(file);
        let bytes = read(&path)?;
        let expected = self
            .files
            .get(file)
            .ok_or_else(|| Error::Checkpoint(format!("{}: not listed in {}", path.display(), state_path.display())))?;
        let found = FileCheck::of(&bytes);
        if found.bytes != expected.bytes {
            return Err(Error::Checkpoint(format!(
                "{}: truncated or overwritten: {} bytes, the checkpoint recorded {}",
                path.display(),
                found.bytes,
                expected.bytes
            )));
        }
        if found.crc32 != expected.crc32 {
            return Err(Error::Checkpoint(format!(
                "{}: corrupted: CRC-32 {:08x}, the checkpoint recorded {:08x}",
                path.display(),
                found.crc32,
                expected.crc32
            )));
        }
        Ok(bytes)
    }
}

/// A checkpoint's files are what a save wrote: never a FIFO or a device.
fn read(path: &Path) -> Result<Vec<u8>> {
    crate::process::input_files::read_regular_file(path)
}
