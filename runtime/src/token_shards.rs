//! llm.c's token shards as a `Dataset`: each file is a header of 256 little-endian int32s (magic
//! 20240520, version 1, the token count, zeros) followed by that many little-endian uint16
//! tokens. A sample is a window of `context` tokens and the next token of each position as its
//! label; sample `i` is the `i`-th window of `context` tokens, shard after shard (a window never
//! spans two shards, as llm.c's loader never reads across one), wrapping around at the end. So
//! each rank reads its own shard of every step by index, and a resumed or re-ranked run reads the
//! same tokens.
//!
//! `write_shard` writes the same format; `prepare_characters` turns a UTF-8 text into character
//! tokens (nanoGPT's vocabulary: the sorted distinct characters) in training and validation
//! shards, with the vocabulary in a file beside them.

mod doubts;
mod format;
mod locate;
mod names;
mod reader;
mod staging;

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::content_hash::ContentHash;
use crate::data::{Batch, Dataset};
use crate::error::{Error, Result};
pub use doubts::shard_doubts;
pub use format::{HEADER_INTS, MAGIC, VERSION};
pub use locate::{locate, val_namesake};
use names::split_part;
pub use reader::read_shard;
use reader::ShardFile;

/// The file `prepare_characters` writes the vocabulary to, beside the shards: the characters
/// of token 0, 1, ..., as UTF-8.
pub const VOCABULARY_FILE: &str = "vocabulary.txt";

/// One shard and how many windows it holds.
struct Shard {
    file: ShardFile,
    windows: u64,
}

/// A list of llm.c token shards as one `Dataset` of windows of `context` tokens (see the
/// module); regular files are read window by window, pipes whole.
pub struct TokenShards {
    shards: Vec<Shard>,
    context: usize,
    windows: u64,
    name: String,
    vocabulary: Option<String>,
    /// Whether `vocabulary` is the file beside the shards (else it was given: `adopt_vocabulary`).
    vocabulary_beside: bool,
    /// The shards' tokens, hashed as they were scanned at `open` (`fingerprint` adds the rest).
    tokens_hash: ContentHash,
    /// One window and its next token, and its bytes, reused by every `fill`.
    window: Vec<u16>,
    bytes: Vec<u8>,
}

impl TokenShards {
    /// Reads `paths` (in this order) into windows of `context` tokens.
    pub fn open(paths: &[PathBuf], context: usize) -> Result<Self> {
        if context == 0 {
            return Err(Error::Config("a token sample needs a context of at least 1 token".into()));
        }
        if paths.is_empty() {
            return Err(Error::Dataset("no token shards given".into()));
        }
        let mut shards = Vec::with_capacity(paths.len());
        let mut tokens_hash = ContentHash::new();
        for path in paths {
            let file = ShardFile::open(path, &mut tokens_hash)?;
            let windows = (file.count.saturating_sub(1) / context) as u64;
            if windows == 0 {
                return Err(Error::Dataset(format!(
                    "{}: {} tokens, too few for one sample of {context} tokens and its next one",
                    path.display(),
                    file.count
                )));
            }
            shards.push(Shard { file, windows });
        }
        let windows = shards.iter().map(|s| s.windows).sum();
        let name = match paths {
            [one] => one.display().to_string(),
            [first, ..] => format!("{} and {} more shard(s)", first.display(), paths.len() - 1),
            [] => unreachable!("checked above"),
        };
        let vocabulary = read_vocabulary(&paths[0])?;
        let vocabulary_beside = vocabulary.is_some();
        let (window, bytes) = (vec![0; context + 1], Vec::with_capacity(2 * (context + 1)));
        let shards =
            TokenShards { shards, context, windows, name, vocabulary, vocabulary_beside, tokens_hash, window, bytes };
        if let Some(vocabulary) = &shards.vocabulary {
            shards.check_ids_in(vocabulary, &paths[0].with_file_name(VOCABULARY_FILE).display().to_string())?;
        }
        Ok(shards)
    }

    /// Past a vocabulary a token id stands for nothing, even where the model has rows: refused,
    /// naming the shard and `source`.
    fn check_ids_in(&self, vocabulary: &str, source: &str) -> Result<()> {
        let (largest, shard) = self.max_token();
        let known = vocabulary.chars().count();
        if usize::from(largest) >= known {
            return Err(Error::Dataset(format!(
                "{}: token id {largest} is past the {known} characters of {source}",
                shard.display()
            )));
        }
        Ok(())
    }

    /// Reads the token ids of shards without a `vocabulary.txt` as `vocabulary`'s characters (the
    /// one a model's file records, named `source` in messages), so that the run's checkpoints and
    /// parameter files record it in turn; refused when an id is past it. Shards with a
    /// vocabulary of their own keep it.
    pub fn adopt_vocabulary(&mut self, vocabulary: &str, source: &str) -> Result<()> {
        if self.vocabulary.is_none() {
            self.check_ids_in(vocabulary, source)?;
            self.vocabulary = Some(vocabulary.to_string());
        }
        Ok(())
    }

    /// The `vocabulary.txt` beside the shards, where they have one.
    pub fn vocabulary_file(&self) -> Option<PathBuf> {
        self.vocabulary_beside.then(|| self.shards[0].file.path.with_file_name(VOCABULARY_FILE))
    }

    /// Tokens per sample.
    pub fn context(&self) -> usize {
        self.context
    }

    /// The shard, or the first of them, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The largest token id in the shards, and the first shard that holds it (for messages).
    pub fn max_token(&self) -> (u16, &Path) {
        let mut largest = (0, self.shards[0].file.path.as_path());
        for shard in &self.shards {
            if shard.file.largest > largest.0 {
                largest = (shard.file.largest, &shard.file.path);
            }
        }
        largest
    }

    /// Tokens in every shard together, as their headers count them.
    pub fn tokens(&self) -> usize {
        self.shards.iter().map(|s| s.file.count).sum()
    }

    /// Tokens held in memory: those of shards that are not regular files (pipes), read whole;
    /// the others are read window by window.
    pub fn tokens_in_memory(&self) -> usize {
        self.shards.iter().filter(|s| s.file.is_loaded()).map(|s| s.file.count).sum()
    }
}

/// Where sample `index` of `shards` (`windows` windows of `context` tokens in all) starts: its
/// shard and offset.
fn window_of(shards: &[Shard], windows: u64, context: usize, index: u64) -> (&ShardFile, usize) {
    let mut w = index % windows;
    for shard in shards {
        if w < shard.windows {
            return (&shard.file, w as usize * context);
        }
        w -= shard.windows;
    }
    unreachable!("the index is below the window count")
}

impl Dataset for TokenShards {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> Result<()> {
        let t = self.context;
        batch.inputs.resize(rows * t, 1);
        batch.labels.clear();
        for s in 0..rows {
            let (shard, at) = window_of(&self.shards, self.windows, t, first.wrapping_add(s as u64));
            shard.read(at, &mut self.window, &mut self.bytes)?;
            let inputs = &mut batch.inputs.as_mut_slice()[s * t..(s + 1) * t];
            for (x, &token) in inputs.iter_mut().zip(&self.window[..t]) {
                *x = f32::from(token);
            }
            batch.labels.extend(self.window[1..].iter().map(|&x| usize::from(x)));
        }
        Ok(())
    }

    fn features(&self) -> usize {
        1
    }

    fn positions(&self) -> usize {
        self.context
    }

    /// Its windows: sample `i` is the `i`-th, shard after shard.
    fn len(&self) -> Option<u64> {
        Some(self.windows)
    }

    fn vocabulary(&self) -> Option<String> {
        self.vocabulary.clone()
    }

    fn token_count(&self) -> Option<usize> {
        Some(usize::from(self.max_token().0) + 1)
    }

    fn fingerprint(&self) -> Option<u64> {
        let mut hash = self.tokens_hash.clone();
        hash.u64(self.context as u64);
        hash.u32s(self.vocabulary.iter().flat_map(|v| v.chars()).map(u32::from));
        Some(hash.finish())
    }

    fn describe(&self) -> String {
        format!("{}: {} tokens, {} windows of {}", self.name, self.tokens(), self.windows, self.context)
    }

    fn files(&self) -> Vec<PathBuf> {
        self.shards.iter().map(|s| s.file.path.clone()).chain(self.vocabulary_file()).collect()
    }
}

/// Writes `tokens` as one shard, through a temporary file renamed over `path`.
pub fn write_shard(path: &Path, tokens: &[u16]) -> Result<()> {
    let count = i32::try_from(tokens.len()).map_err(|_| {
        Error::Dataset(format!("{}: {} tokens, more than a shard's header counts", path.display(), tokens.len()))
    })?;
    let mut bytes = Vec::with_capacity(HEADER_INTS * 4 + tokens.len() * 2);
    let mut header = [0i32; HEADER_INTS];
    header[..3].copy_from_slice(&[MAGIC, VERSION, count]);
    header.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
    tokens.iter().for_each(|t| bytes.extend_from_slice(&t.to_le_bytes()));
    write_file(path, &bytes)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let partial = path.with_extension("partial");
    let mut file = std::fs::File::create(&partial).map_err(io)?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(io)?;
    std::fs::rename(&partial, path).map_err(io)
}

/// The vocabulary file beside a shard, if `prepare_characters` wrote one: token `i` is its
/// `i`-th character, so no character may appear twice.
fn read_vocabulary(shard: &Path) -> Result<Option<String>> {
    let path = shard.with_file_name(VOCABULARY_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Io { path, source }),
    };
    if let Some(why) = crate::text::repeated_character(&text) {
        return Err(Error::Dataset(format!("{}: {why}", path.display())));
    }
    Ok(Some(text))
}

/// The `vocabulary.txt` beside the training shards of `path` (as `locate` finds them), where
/// they have one, and its path: the characters a sample from a model trained on them prints, read
/// without reading the shards.
pub fn vocabulary_beside(path: &Path) -> Result<Option<(PathBuf, String)>> {
    let (train, _) = locate(path)?;
    let Some(first) = train.first() else {
        return Err(Error::Dataset(format!("{}: no training shards", path.display())));
    };
    Ok(read_vocabulary(first)?.map(|vocabulary| (first.with_file_name(VOCABULARY_FILE), vocabulary)))
}

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

/// What `prepare_characters` wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The sorted distinct characters, token 0 first, as written to `vocabulary.txt`.
    pub vocabulary: String,
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
/// vocabulary (the sorted distinct characters) in `vocabulary.txt`.
pub fn prepare_characters(text: &str, out: &Path, stem: &str, shard_tokens: usize) -> Result<Prepared> {
    if shard_tokens < 2 {
        return Err(Error::Config(format!(
            "shards of {shard_tokens} token(s) hold no sample: a sample is at least a token and its next one"
        )));
    }
    let vocab = crate::text::vocabulary(text);
    if vocab.len() > usize::from(u16::MAX) + 1 {
        return Err(Error::Dataset(format!("{} distinct characters: token ids are 16-bit", vocab.len())));
    }
    let tokens: Vec<u16> = text.chars().map(|c| vocab.binary_search(&c).expect("in the vocabulary") as u16).collect();
    let train_end = (tokens.len() as f64 * 0.9) as usize;
    if train_end < 2 {
        return Err(Error::Dataset(format!(
            "{} character(s): their first 90% ({train_end} token(s)) cannot make one training sample, an input and \
             the token after it",
            tokens.len()
        )));
    }
    // The shards go into `out`, named after `stem`: a path would put them elsewhere.
    if stem.is_empty() || stem.contains(['/', '\0']) || stem == "." || stem == ".." {
        return Err(Error::Config(format!(
            "shard name {stem:?}: give a plain name (no `/`), which the shards' file names start with"
        )));
    }
    if out.exists() && !out.is_dir() {
        return Err(Error::Config(format!(
            "{}: exists and is not a folder; the shards go into a folder",
            out.display()
        )));
    }
    refuse_earlier_shards(out)?;
    // Everything is written into a staging folder first and moved into `out` once whole, so that
    // a failed or interrupted run leaves no shards that `--tokens` would read as a dataset.
    let folder = staging::begin(out, stem)?;
    let published = write_staged(&tokens, train_end, &vocab, &folder, stem, shard_tokens).and_then(|staged| {
        // Shards first and the vocabulary last.
        let files: Vec<PathBuf> =
            staged.train.iter().chain(&staged.val).cloned().chain([folder.join(VOCABULARY_FILE)]).collect();
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
    vocab: &[char],
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
    let vocabulary: String = vocab.iter().collect();
    write_file(&out.join(VOCABULARY_FILE), vocabulary.as_bytes())?;
    // A held-out part too short for a sample was not written.
    let val_tokens = if val.is_empty() { 0 } else { tokens.len() - train_end };
    Ok(Prepared { vocabulary, train, val, train_tokens: train_end, val_tokens })
}

#[cfg(test)]
mod tests;
