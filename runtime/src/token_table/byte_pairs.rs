//! Text as a tokenizer file's tokens, GPT-2's byte-level byte-pair encoding. The file holds no
//! merges, and needs none: GPT-2's token ids are the ranks of its merges. tiktoken's `gpt2`
//! encoding is nothing but each token's bytes in id order (its `mergeable_ranks`) and GPT-2's
//! splitting pattern, and llm.c's `train_gpt2.py` writes the file from those bytes. So a text
//! encodes as tiktoken encodes it: split by the pattern; a piece that is one token whole is that
//! token; any other starts as its bytes and joins, again and again, the adjacent pair whose
//! joined bytes are the token of lowest id (the leftmost of equals), until no pair joins into a
//! token. `<|endoftext|>` in the text is the end-of-text token, as tiktoken's `encode` reads it
//! when allowed (nanoGPT's `sample.py` and llm.c's `tinyshakespeare.py` allow it).
//! `tests/gpt2_encoding.rs` holds this to tiktoken's own tokens.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::TokenTable;

/// GPT-2's pattern for splitting text before its pieces are merged (its `encoder.py`'s, the
/// contractions grouped; tiktoken's `gpt2` encoding spells it otherwise, to the same effect):
/// contractions, letters, digits and other runs with one leading space each, and whitespace, the
/// last of a run left to the word after it.
const GPT2_SPLIT_PATTERN: &str = r"'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

impl TokenTable {
    /// `text` as this table's tokens (see the module's notes). An error says which byte of the
    /// text no token stands for alone (every byte does in GPT-2's table).
    pub fn encode(&self, text: &str) -> Result<Vec<usize>, String> {
        let mut tokens = Vec::new();
        self.encode_each(text, |token| tokens.push(token))?;
        Ok(tokens)
    }

    /// [`encode`](Self::encode), handing each token to `emit` as it comes: a long text's tokens
    /// kept as the caller keeps them (16-bit, in llm.c's shards), never all as `usize`s.
    pub fn encode_each(&self, text: &str, mut emit: impl FnMut(usize)) -> Result<(), String> {
        let encoder = Encoder::new(self)?;
        let end_of_text = std::str::from_utf8(self.bytes(self.end_of_text)).ok();
        let documents: Vec<&str> = match end_of_text {
            Some(marker) => text.split(marker).collect(),
            None => vec![text],
        };
        // Each marker between two documents is the end-of-text token.
        for (i, document) in documents.into_iter().enumerate() {
            if i > 0 {
                emit(self.end_of_text);
            }
            encoder.encode_ordinary(document, &mut emit)?;
        }
        Ok(())
    }
}

/// A table's tokens by their bytes, and the pattern that splits text.
struct Encoder {
    /// The lowest id of each token's bytes; end-of-text is not among them (text never merges
    /// into it, as in tiktoken, where it is a special token).
    ids: HashMap<Vec<u8>, usize>,
    /// The most bytes a token holds: longer joins are no token.
    longest: usize,
    split: fancy_regex::Regex,
}

impl Encoder {
    fn new(table: &TokenTable) -> Result<Encoder, String> {
        let mut ids = HashMap::with_capacity(table.len());
        for id in (0..table.len()).filter(|&id| id != table.end_of_text) {
            ids.entry(table.bytes(id).to_vec()).or_insert(id);
        }
        let longest = ids.keys().map(Vec::len).max().unwrap_or(0);
        let split = fancy_regex::Regex::new(GPT2_SPLIT_PATTERN).map_err(|e| format!("GPT-2's split pattern: {e}"))?;
        Ok(Encoder { ids, longest, split })
    }

    /// Hands on the tokens of `text`, read as ordinary text (tiktoken's `encode_ordinary`).
    fn encode_ordinary(&self, text: &str, emit: &mut impl FnMut(usize)) -> Result<(), String> {
        for piece in self.split.find_iter(text) {
            let piece = piece.map_err(|e| format!("splitting the text with GPT-2's pattern: {e}"))?;
            self.merge(piece.as_str().as_bytes(), emit)?;
        }
        Ok(())
    }

    /// Hands on the tokens of one piece: the piece's own token, else its bytes merged pair by pair,
    /// lowest id first, leftmost of equals. The pairs wait in a heap, so that a long piece (a run
    /// of letters without end) takes `n log n`, not the `n^2` of scanning every pair per join.
    fn merge(&self, piece: &[u8], emit: &mut impl FnMut(usize)) -> Result<(), String> {
        if let Some(&id) = self.ids.get(piece) {
            emit(id);
            return Ok(());
        }
        let n = piece.len();
        // The parts as a list over the piece's bytes: the part starting at `s` ends at `next[s]`
        // (`n` for the last); `before[s]` is the start of the part before it, if any.
        let mut next: Vec<usize> = (1..=n).collect();
        let mut before: Vec<Option<usize>> = (0..n).map(|s| s.checked_sub(1)).collect();
        let mut joined = vec![false; n];
        // A pair of adjacent parts, `start..middle` and `middle..end`, whose joined bytes are token
        // `id`: least `(id, start)` first.
        let mut pairs = BinaryHeap::new();
        let pair = |start: usize, middle: usize, end: usize| {
            let id = if end - start <= self.longest { self.ids.get(&piece[start..end]) } else { None };
            id.map(|&id| Reverse((id, start, middle, end)))
        };
        pairs.extend((0..n.saturating_sub(1)).filter_map(|s| pair(s, s + 1, s + 2)));
        while let Some(Reverse((_, start, middle, end))) = pairs.pop() {
            // A pair whose parts have since grown is gone.
            if joined[start] || joined[middle] || next[start] != middle || next[middle] != end {
                continue;
            }
            joined[middle] = true;
            next[start] = end;
            if end < n {
                before[end] = Some(start);
                pairs.extend(pair(start, end, next[end]));
            }
            if let Some(left) = before[start] {
                pairs.extend(pair(left, start, end));
            }
        }
        let mut start = 0;
        while start < n {
            let part = &piece[start..next[start]];
            // Only a part that was never joined can be missing: a single byte.
            let id = self.ids.get(part).ok_or_else(|| {
                format!(
                    "byte {:#04x} of {:?} is no token of the tokenizer file, which byte-level text needs (GPT-2's \
                     has all 256 bytes)",
                    part[0],
                    String::from_utf8_lossy(piece)
                )
            })?;
            emit(*id);
            start = next[start];
        }
        Ok(())
    }
}
