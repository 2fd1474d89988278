//! `prepare_characters`: a UTF-8 text as character tokens (nanoGPT's vocabulary, the sorted
//! distinct characters) in training and validation shards, the vocabulary beside them; and
//! `prepare_tokens`: a tokenizer's tokens (GPT-2's) in shards alike, with no vocabulary. All
//! published at once from a staging folder.

use std::path::{Path, PathBuf};

use super::format::{write_file, write_shard};
use super::names::{split_part, VOCABULARY_FILE};
use super::staging;
use crate::error::{Error, Result};

/// `--tokens` reads every shard of a folder, against the one `vocabulary.txt`: shards of another
/// text, or more of an earlier run of this one, must not be left beside new ones.
fn refuse_earlier_shards(out: &Path) -> Result<()> {
    let Ok(listed) = std::fs::read_dir(out) else { return Ok(()) }; // Missing: created next.
    let mut earlier: Vec<String> = listed
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n == "vocabulary.txt" || split_part(n).is_some())
        .collect();
    earlier.sort();
    match earlier.first() {
        None => Ok(()),
        Some(first) => Err(Error::Dataset(format!(
            "{}: already holds token shards or a vocabulary ({first}, {} file(s) in all); a folder's shards are \
             read together, against one vocabulary, so write into an empty one",
            out.display(),
            earlier.len()
        ))),
    }
}

/// Refuses what `prepare_characters` and `prepare_tokens` would refuse to write into before
/// they write: a `stem` that is a path, an `out` that is no folder or already holds shards, or
/// another name's unfinished `prepare`. A caller with a long encoding ahead checks first.
pub fn check_destination(out: &Path, stem: &str) -> Result<()> {
    // The shards go into `out`, named after `stem`: a path would put them elsewhere.
    if stem.is_empty() || stem.contains(['/', '\0']) || stem == "." || stem == ".." {
        let plain = if stem.is_empty() { "" } else { " plain" };
        return Err(Error::Config(format!(
            "shard name {stem:?}: give a{plain} name (no `/`), which the shards' file names start with"
        )));
    }
    if out.exists() && !out.is_dir() {
        return Err(Error::Config(format!(
            "{}: exists and is not a folder; the shards go into a folder",
            out.display()
        )));
    }
    // Another name's unfinished `prepare`: `locate` refuses the folder until it has gone.
    if let Some(staging) = super::staging::unfinished_but(out, Some(stem)) {
        return Err(Error::Dataset(format!(
            "{}: holds {}, which a `prepare` of other shards that did not finish left: remove it first (the \
             folder's shards are not read while it holds one)",
            out.display(),
            staging.display()
        )));
    }
    refuse_earlier_shards(out)
}

/// What `prepare_characters` or `prepare_tokens` wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The sorted distinct characters, token 0 first, as written to `vocabulary.txt`; none for
    /// `prepare_tokens`.
    pub vocabulary: Option<String>,
    /// The training shards, in order.
    pub train: Vec<PathBuf>,
    /// The validation shards, in order; none when the last 10% is too short for a sample.
    pub val: Vec<PathBuf>,
    /// Tokens in the training shards: the text's first 90%.
    pub train_tokens: usize,
    /// Tokens in the validation shards (0 when none was written).
    pub val_tokens: usize,
}

/// `text` as character tokens in `out`: the first 90% in `<stem>_train_NNNNNN.bin` shards of at
/// most `shard_tokens` tokens, the rest in `<stem>_val_NNNNNN.bin` shards alike, and the
/// vocabulary (the sorted distinct characters) in `vocabulary.txt`. A shard holds at least a
/// sample (a token and its next one), so a `shard_tokens` under 2 counts as 2, and at 2 a split
/// of odd length has one shard of 3.
pub fn prepare_characters(text: &str, out: &Path, stem: &str, shard_tokens: usize) -> Result<Prepared> {
    let vocab = crate::text::vocabulary(text);
    if vocab.len() > usize::from(u16::MAX) + 1 {
        return Err(Error::Dataset(format!("{} distinct characters: token ids are 16-bit", vocab.len())));
    }
    let tokens: Vec<u16> = text.chars().map(|c| vocab.binary_search(&c).expect("in the vocabulary") as u16).collect();
    let vocabulary: String = vocab.iter().collect();
    prepare(&tokens, Some(vocabulary), out, stem, shard_tokens)
}

/// `tokens`, a tokenizer's ids (GPT-2's, which `gpt --tokenizer` prints), in `out` as
/// `prepare_characters` writes shards, with no `vocabulary.txt`: the ids stand for what their
/// tokenizer says, not for characters.
pub fn prepare_tokens(tokens: &[u16], out: &Path, stem: &str, shard_tokens: usize) -> Result<Prepared> {
    prepare(tokens, None, out, stem, shard_tokens)
}

/// `tokens` in shards, and `vocabulary` beside them where given.
fn prepare(
    tokens: &[u16],
    vocabulary: Option<String>,
    out: &Path,
    stem: &str,
    shard_tokens: usize,
) -> Result<Prepared> {
    if shard_tokens < 2 {
        return Err(Error::Config(format!(
            "shards of {shard_tokens} token(s) hold no sample: a sample is at least a token and its next one"
        )));
    }
    let train_end = (tokens.len() as f64 * 0.9) as usize;
    if train_end < 2 {
        let unit = if vocabulary.is_some() { "character(s)" } else { "token(s)" };
        return Err(Error::Dataset(format!(
            "{} {unit}: their first 90% ({train_end} token(s)) cannot make one training sample, an input and the \
             token after it",
            tokens.len()
        )));
    }
    check_destination(out, stem)?;
    // Everything is written into a staging folder first and moved into `out` once whole, so that
    // a failed or interrupted run leaves no shards that `--tokens` would read as a dataset.
    let folder = staging::begin(out, stem)?;
    let published = write_staged(tokens, train_end, vocabulary, &folder, stem, shard_tokens).and_then(|staged| {
        // Shards first and the vocabulary last.
        let vocabulary_file = staged.vocabulary.as_ref().map(|_| folder.join(VOCABULARY_FILE));
        let files: Vec<PathBuf> = staged.train.iter().chain(&staged.val).cloned().chain(vocabulary_file).collect();
        staging::publish(&folder, out, &files)?;
        let moved = |files: &[PathBuf]| staging::moved_into(out, files);
        Ok(Prepared { train: moved(&staged.train), val: moved(&staged.val), ..staged })
    });
    if published.is_err() {
        staging::abandon(&folder);
    }
    published
}

/// The shards and the vocabulary, written into `out`.
fn write_staged(
    tokens: &[u16],
    train_end: usize,
    vocabulary: Option<String>,
    out: &Path,
    stem: &str,
    shard_tokens: usize,
) -> Result<Prepared> {
    let write = |split: &str, parts: &[u16]| -> Result<Vec<PathBuf>> {
        // Shards of at most `shard_tokens` as equal as can be, not full ones and a short last one, which
        // could be too short for one sample; and never of one token, which holds no sample at all
        // (an odd split into shards of 2 begins with one of 3). The first `n % count` shards take
        // one token more than the others.
        if parts.len() < 2 {
            return Ok(Vec::new()); // No shard could hold a sample (an empty split, or one token).
        }
        let count = parts.len().div_ceil(shard_tokens.max(1)).min(parts.len() / 2);
        let (size, longer) = (parts.len() / count, parts.len() % count);
        let mut written = Vec::new();
        let mut start = 0;
        for k in 0..count {
            let end = start + size + usize::from(k < longer);
            let path = out.join(format!("{stem}_{split}_{k:06}.bin"));
            write_shard(&path, &parts[start..end])?;
            written.push(path);
            start = end;
        }
        Ok(written)
    };
    let (train, val) = (write("train", &tokens[..train_end])?, write("val", &tokens[train_end..])?);
    if let Some(vocabulary) = &vocabulary {
        write_file(&out.join(VOCABULARY_FILE), vocabulary.as_bytes())?;
    }
    // A held-out part too short for a sample was not written.
    let val_tokens = if val.is_empty() { 0 } else { tokens.len() - train_end };
    Ok(Prepared { vocabulary, train, val, train_tokens: train_end, val_tokens })
}
