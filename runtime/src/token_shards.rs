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
//! shards, with the vocabulary in a file beside them; `prepare_tokens` writes a tokenizer's ids
//! (GPT-2's) alike, with none.

mod doubts;
mod format;
mod locate;
mod names;
mod prepare;
mod reader;
mod staging;

use std::path::{Path, PathBuf};

use crate::content_hash::ContentHash;
use crate::data::{Batch, Dataset};
use crate::error::{Error, Result};
pub use doubts::shard_doubts;
pub use format::{write_shard, HEADER_INTS, MAGIC, VERSION};
pub use locate::{is_held_out_file, locate, val_namesake};
pub use names::VOCABULARY_FILE;
pub use prepare::{check_destination, prepare_characters, prepare_tokens, Prepared};
pub use reader::read_shard;
use reader::ShardFile;

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
        reader::room_to_keep_open(paths.len())?;
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

/// The vocabulary file beside a shard, if `prepare_characters` wrote one: token `i` is its
/// `i`-th character, so no character may appear twice.
fn read_vocabulary(shard: &Path) -> Result<Option<String>> {
    let path = shard.with_file_name(VOCABULARY_FILE);
    // A file `prepare` wrote: not a device (`/dev/zero` would fill memory), nor a FIFO.
    let bytes = match crate::process::input_files::read_regular_file(&path) {
        Ok(bytes) => bytes,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        Error::Dataset(format!("{}: not UTF-8 text (invalid at byte {at})", path.display()))
    })?;
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

#[cfg(test)]
mod tests;
