//! Parameters to and from safetensors files, with PyTorch's `state_dict` names and layouts, so
//! `safetensors.torch.load_file` reads them directly.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::Dtype;
use safetensors::SafeTensors;

use crate::error::{Error, Result};
use crate::model::DistributedModel;
use crate::process::atomic_write::write_atomically;
use crate::tensor_file::{self, Tensor};

mod reading;
mod shapes;
#[cfg(test)]
mod tests;
pub use shapes::param_shapes;

/// The f32 values of little-endian `bytes`.
pub(crate) fn f32_values(bytes: &[u8]) -> Vec<f32> {
    f32s(bytes).collect()
}

/// The little-endian f32 values of `bytes`, one by one.
pub(crate) fn f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Decodes `bytes` (little-endian f32, as many as `into` holds) into `into`, with no copy between.
pub(crate) fn decode_into(into: &mut [f32], bytes: &[u8]) {
    assert_eq!(into.len() * 4, bytes.len(), "a parameter of another length than its checked shape");
    into.iter_mut().zip(f32s(bytes)).for_each(|(to, from)| *to = from);
}

/// Every parameter of `model`, under its PyTorch name and shape, borrowed from the model.
pub(crate) fn model_tensors<M: DistributedModel>(model: &M) -> Vec<Tensor<'_>> {
    let s = M::SCHEDULE;
    s.params().map(|p| Tensor::new(s.param_name(p), s.param(p).shape.to_vec(), model.param(p))).collect()
}

/// The header key of the vocabulary a language model's token ids index (`FileNotes::vocabulary`).
const VOCABULARY_KEY: &str = "vocabulary";
/// The header key of the sequence length a language model was trained on (`FileNotes::positions`).
const POSITIONS_KEY: &str = "positions";

/// What a parameters file records beside its tensors, in its header's `__metadata__`: what a
/// language model's token ids stand for, and how long the sequences it was trained on were.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileNotes {
    /// The characters a character-level model's token ids index (token `i` is the `i`-th), as
    /// nanoGPT keeps `itos` in `meta.pkl`.
    pub vocabulary: Option<String>,
    /// The positions of the sequences trained on: a position embedding's rows past them were
    /// never trained, so sampling from the file reads no further by default.
    pub positions: Option<usize>,
}

/// Writes every parameter of `model` to `path` as little-endian f32 tensors, atomically: a kill
/// or a failed write leaves the previous file (or none), never part of one.
pub fn save_params<M: DistributedModel>(model: &M, path: &Path) -> Result<()> {
    save_params_with_notes(model, path, &FileNotes::default())
}

/// `save_params`, with `notes` in the file's metadata.
pub fn save_params_with_notes<M: DistributedModel>(model: &M, path: &Path, notes: &FileNotes) -> Result<()> {
    check_notes(notes).map_err(|e| Error::Safetensors(format!("{}: {e}", path.display())))?;
    check_parameters_home(model)?;
    write_atomically(path, |file| write_model_file(file, model, notes), crate::fault::at_params_synced)
        .map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

/// Refuses to save a model whose parameters are lent to a step in progress (between `backward`
/// and `step`, or, with sharded optimizer state, before the next `forward_gathering`): their
/// `Vec`s are empty until the step gives them back, and a file of them would hold nothing.
pub(crate) fn check_parameters_home<M: DistributedModel>(model: &M) -> Result<()> {
    let s = M::SCHEDULE;
    let lent = s.params().find(|&p| model.param(p).is_empty() && s.param(p).numel() > 0);
    match lent {
        Some(p) => Err(Error::Config(format!(
            "{}'s parameter `{}` is lent to a step in progress: save after `step` has given the parameters back \
             (and, with sharded optimizer state, after the next `forward_gathering`)",
            s.model,
            s.param_name(p)
        ))),
        None => Ok(()),
    }
}

/// Notes a file may record (read back, `positions` of 0 would be refused by `notes_in`: the
/// file could not be loaded).
pub(crate) fn check_notes(notes: &FileNotes) -> std::result::Result<(), String> {
    if let Some(why) = notes.vocabulary.as_deref().and_then(crate::text::repeated_character) {
        return Err(format!("`vocabulary` {why}"));
    }
    match notes.positions {
        Some(0) => Err("`positions` is 0, not a sequence length: give the length trained on, or none".into()),
        _ => Ok(()),
    }
}

/// Writes a parameters file of `model` to `out`, `notes` (checked by `check_notes`) in the
/// metadata: what `--save-params` writes, and a checkpoint's model file, so that either, given
/// to `--init-params`, is checked against the text the run reads.
pub(crate) fn write_model_file<M: DistributedModel>(
    out: &mut dyn std::io::Write,
    model: &M,
    notes: &FileNotes,
) -> std::io::Result<()> {
    let metadata: std::collections::HashMap<String, String> = [
        notes.vocabulary.clone().map(|v| (VOCABULARY_KEY.to_string(), v)),
        notes.positions.map(|n| (POSITIONS_KEY.to_string(), n.to_string())),
    ]
    .into_iter()
    .flatten()
    .collect();
    tensor_file::write(out, &model_tensors(model), (!metadata.is_empty()).then_some(metadata))
}

/// The vocabulary a parameters file records (`FileNotes::vocabulary`), if any.
pub fn load_vocabulary(path: &Path) -> Result<Option<String>> {
    load_notes(path).map(|notes| notes.vocabulary)
}

/// What a parameters file records beside its tensors (see `FileNotes`).
pub fn load_notes(path: &Path) -> Result<FileNotes> {
    notes_in(&read_file(path)?, path)
}

/// `path` (its contents `bytes`) could not be read as safetensors: say what it is not, then the
/// format's complaint ("header too large" alone leaves a user guessing which header), and what
/// the file seems to be instead.
fn not_safetensors(path: &Path, bytes: &[u8], e: safetensors::SafeTensorError) -> Error {
    // A pickle starts with its PROTO opcode (0x80) and a protocol of 2 to 5: a safetensors
    // header's length may start with 0x80 too, but then reads as one (its JSON follows).
    let pickle = matches!(bytes, [0x80, 2..=5, ..]) && described_length(bytes).is_none();
    let seems = if bytes.starts_with(b"PK\x03\x04") || pickle {
        // A zip archive (`torch.save` since PyTorch 1.6) or a pickle (before).
        ": it looks like a `torch.save` file; write the parameters with \
         `safetensors.torch.save_file(model.state_dict(), path)`"
            .to_string()
    } else {
        let header_len = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
        match (described_length(bytes), header_len) {
            (Some(described), _) if described > bytes.len() as u64 => {
                format!(": the file is {} bytes, its header describes {described}: it was cut short", bytes.len())
            }
            // Cut inside the header (the format's headers are at most 100 MB: a longer one is no
            // length at all).
            (None, Some(header)) if header <= shapes::MAX_HEADER_BYTES && 8 + header > bytes.len() as u64 => format!(
                ": the file is {} bytes, and its header alone takes {} from its 9th byte: it was cut short",
                bytes.len(),
                header
            ),
            _ => String::new(),
        }
    };
    Error::Safetensors(format!("{}: not a safetensors file ({e}){seems}", path.display()))
}

/// The length of the file a safetensors header describes (its 8 bytes, the header, and the end
/// of the last tensor's data), where the header reads as one.
fn described_length(bytes: &[u8]) -> Option<u64> {
    let header_len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let header = bytes.get(8..8usize.checked_add(usize::try_from(header_len).ok()?)?)?;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    let data_end = header.values().filter_map(|tensor| tensor.get("data_offsets")?.get(1)?.as_u64()).max().unwrap_or(0);
    8u64.checked_add(header_len)?.checked_add(data_end)
}

fn notes_in(bytes: &[u8], path: &Path) -> Result<FileNotes> {
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| not_safetensors(path, bytes, e))?;
    let metadata = header.metadata().as_ref();
    let get = |key: &str| metadata.and_then(|m| m.get(key));
    let positions = match get(POSITIONS_KEY) {
        None => None,
        Some(n) => match n.parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return Err(Error::Safetensors(format!(
                    "{}: its metadata's `{POSITIONS_KEY}` is `{n}`, not a sequence length",
                    path.display()
                )))
            }
        },
    };
    let vocabulary = get(VOCABULARY_KEY).cloned();
    if let Some(why) = vocabulary.as_deref().and_then(crate::text::repeated_character) {
        return Err(Error::Safetensors(format!("{}: its metadata's `{VOCABULARY_KEY}` {why}", path.display())));
    }
    Ok(FileNotes { vocabulary, positions })
}

/// Each tensor's data in `bytes` (little-endian f32, borrowed from the file: `decode_into` or
/// `f32_values` reads it), by name, if every tensor is in `expected` with the same shape and
/// dtype; otherwise every problem found. `required` names must all be present.
pub(crate) fn read_checked<'b>(
    bytes: &'b [u8],
    expected: &BTreeMap<String, Vec<usize>>,
    required: impl Fn(&str) -> bool,
) -> Result<BTreeMap<String, &'b [u8]>, Vec<String>> {
    let file = SafeTensors::deserialize(bytes).map_err(|e| vec![format!("not a valid safetensors file: {e}")])?;
    let (mut problems, mut unexpected, mut missing) = (Vec::new(), Vec::new(), Vec::new());
    // Unexpected names that are expected ones under DDP's wrapper prefix (`module.fc1.weight`).
    let mut under_module = 0;
    // Tensors in another dtype, by dtype: a file saved in half precision names every tensor.
    let mut retyped: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut out = BTreeMap::new();
    let mut found = file.tensors();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, view) in found {
        match expected.get(&name) {
            None => {
                under_module += usize::from(name.strip_prefix("module.").is_some_and(|n| expected.contains_key(n)));
                unexpected.push(format!("`{name}` {:?}", view.shape()))
            }
            Some(shape) if shape.as_slice() != view.shape() => {
                problems.push(format!("`{name}` has shape {:?}, the model expects {shape:?}", view.shape()))
            }
            Some(_) if view.dtype() != Dtype::F32 => {
                retyped.entry(format!("{:?}", view.dtype())).or_default().push(format!("`{name}`"))
            }
            Some(_) => {
                out.insert(name, view.data());
            }
        }
    }
    let present: Vec<String> = file.names().into_iter().map(str::to_string).collect();
    for (name, shape) in expected {
        if required(name) && !present.contains(name) {
            missing.push(format!("`{name}` {shape:?}"));
        }
    }
    for (dtype, names) in &retyped {
        problems.push(match names.as_slice() {
            [one] => format!("{one} is {dtype}, the model expects F32"),
            _ => format!("{} tensors are {dtype}, the model expects F32: {}", names.len(), first_few(names)),
        });
    }
    // DDP's wrapper prefixes every name: `state_dict()` of the wrapper.
    if !unexpected.is_empty() && under_module == unexpected.len() {
        problems.push(
            "the names carry DDP's `module.` prefix: save the model inside (`ddp_model.module.state_dict()`), or \
             strip the prefix"
                .to_string(),
        );
    }
    // Another model's file would name each of its tensors: a few per kind, and how many more.
    problems.extend(listed("unexpected tensor", " (the model has no such parameter)", &unexpected));
    problems.extend(listed("missing tensor", "", &missing));
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// One problem for `names` of one kind (`unexpected tensor`), naming the first few: none for none.
fn listed(kind: &str, why: &str, names: &[String]) -> Option<String> {
    match names {
        [] => None,
        [one] => Some(format!("{kind} {one}{why}")),
        _ => Some(format!("{} {kind}s{why}: {}", names.len(), first_few(names))),
    }
}

/// The first few of `names`, and how many more.
fn first_few(names: &[String]) -> String {
    const NAMED: usize = 4;
    let more = names.len().saturating_sub(NAMED);
    let and_more = if more > 0 { format!(" and {more} more") } else { String::new() };
    format!("{}{and_more}", names[..names.len().min(NAMED)].join(", "))
}

/// Loads the parameters file `path` into `model` as PyTorch's `load_state_dict(strict=True)`
/// does: every parameter of the model under its name (`blocks.3.fc1.weight`), with its shape and
/// as F32, and nothing else; every difference is named at once. Reads what `save_params` writes
/// and what `safetensors.torch.save_file(model.state_dict(), path)` writes for a twin. A tied
/// weight may also come under the name of the layer that reads it (`lm_head.weight` for
/// `wte.weight`), alone, as `safetensors.torch.save_model` keeps it, or beside its owner with
/// the same values, as a cloned `state_dict` holds it.
pub fn load_into<M: DistributedModel>(model: &mut M, path: &Path) -> Result<()> {
    fill(model, &read_file(path)?, path)
}

/// The name of the parameters file in each step folder of a checkpoint.
pub(crate) const MODEL_FILE: &str = "model.safetensors";

/// A parameters file's bytes; a folder (a checkpoint's, most likely) is named as one.
fn read_file(path: &Path) -> Result<Vec<u8>> {
    if path.is_dir() {
        return Err(Error::Safetensors(format!(
            "{}: a folder, not a parameters file (a checkpoint folder is resumed from; each of its step folders \
             holds the parameters alone, in {MODEL_FILE})",
            path.display()
        )));
    }
    reading::read_bytes(path)
}

/// `load_into`, also returning what the file records beside its tensors (`load_notes`), from
/// one read of it: the path may be a pipe (`--init-params <(zcat model.safetensors.gz)`).
pub fn load_into_with_notes<M: DistributedModel>(model: &mut M, path: &Path) -> Result<FileNotes> {
    let bytes = read_file(path)?;
    // The notes first: a file whose notes cannot be read leaves the model as it was.
    let notes = notes_in(&bytes, path)?;
    if let (Some(trained), Some(rows)) = (notes.positions, crate::model::position_rows::<M>()) {
        if trained > rows {
            return Err(Error::Safetensors(format!(
                "{}: its metadata's `{POSITIONS_KEY}` is {trained}, more than the {rows} rows of {}'s position table: \
                 no run of this model trained on such sequences",
                path.display(),
                M::SCHEDULE.model
            )));
        }
    }
    fill(model, &bytes, path)?;
    Ok(notes)
}

fn fill<M: DistributedModel>(model: &mut M, bytes: &[u8], path: &Path) -> Result<()> {
    let s = M::SCHEDULE;
    let mut expected: BTreeMap<String, Vec<usize>> =
        s.params().map(|p| (s.param_name(p), s.param(p).shape.to_vec())).collect();
    // alias -> owner: `lm_head.weight` -> `wte.weight`.
    let aliases: BTreeMap<String, String> = s
        .layers
        .iter()
        .filter_map(|layer| {
            layer.tied.map(|owner| (format!("{}.{}", layer.name, s.param(owner).name), s.param_name(owner)))
        })
        .collect();
    let file = SafeTensors::deserialize(bytes).map_err(|e| not_safetensors(path, bytes, e))?;
    let present: Vec<String> = file.names().into_iter().map(str::to_string).collect();
    for (alias, owner) in &aliases {
        expected.insert(alias.clone(), expected[owner].clone());
    }
    let stands_in = |name: &str| aliases.iter().any(|(alias, owner)| owner == name && present.contains(alias));
    let fail = |problems: Vec<String>| {
        Error::Safetensors(format!("{} does not fit {}:\n  - {}", path.display(), s.model, problems.join("\n  - ")))
    };
    let mut values =
        read_checked(bytes, &expected, |name| !aliases.contains_key(name) && !stands_in(name)).map_err(fail)?;
    let mut problems = Vec::new();
    for (alias, owner) in &aliases {
        let Some(tied) = values.remove(alias) else { continue };
        match values.get(owner) {
            // Bit for bit, as the bytes are.
            Some(own) if *own != tied => problems.push(format!(
                "`{alias}` and `{owner}` hold other values, but `{alias}` is `{owner}` (tied): one parameter"
            )),
            Some(_) => {}
            None => {
                values.insert(owner.clone(), tied);
            }
        }
    }
    problems.extend(non_finite(&values, "a parameter"));
    if !problems.is_empty() {
        return Err(fail(problems));
    }
    for p in s.params() {
        decode_into(model.param_mut(p), values[&s.param_name(p)]);
    }
    Ok(())
}

/// A problem for each of `tensors` (names and little-endian f32 bytes) holding a value that is
/// not finite, naming its first such value; `what` says what the tensors are.
pub(crate) fn non_finite(tensors: &BTreeMap<String, &[u8]>, what: &str) -> Vec<String> {
    let first = |bytes: &[u8]| f32s(bytes).enumerate().find(|(_, x)| !x.is_finite());
    let found = tensors.iter().filter_map(|(name, bytes)| Some((name, first(bytes)?)));
    found.map(|(name, (at, x))| format!("`{name}` holds {x} at index {at}: {what} must be finite")).collect()
}

/// One named tensor read back from a file: `(name, shape, values)`.
pub type NamedTensor = (String, Vec<usize>, Vec<f32>);

/// Reads a parameter file written by `save_params`, its tensors sorted by name (the format's
/// header is a map: it keeps no order of its own).
pub fn load_params(path: &Path) -> Result<Vec<NamedTensor>> {
    let bytes = read_file(path)?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| not_safetensors(path, &bytes, e))?;
    let mut out = Vec::new();
    for (name, view) in file.iter() {
        shapes::require_f32(path, name, view.dtype())?;
        out.push((name.to_string(), view.shape().to_vec(), f32_values(view.data())));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
