//! llm.c's tokenizer file (`gpt2_tokenizer.bin`, which its `train_gpt2.py` writes): the bytes
//! each token id stands for, which is all it takes to print GPT-2's tokens as text. The file is
//! a header of 256 little-endian int32s (magic 20240328, version, the number of tokens, and from
//! version 2 the end-of-text token's id), then each token as one length byte (at least 1)
//! followed by that many bytes. The reader checks what llm.c's `tokenizer.h` asserts, and refuses
//! besides what it would read past or leave unread: an end-of-text id past the tokens, bytes
//! after the last token.
//!
//! A token's bytes need not be whole UTF-8 characters (GPT-2's byte-level tokens split them):
//! [`Utf8Stream`] prints tokens as they come, holding a character's first bytes until its last.
//! The file holds no merges, yet encodes text too ([`TokenTable::encode`]): GPT-2's ids are the
//! ranks of its merges, as tiktoken reads them.

mod byte_pairs;
mod utf8_stream;

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::token_shards::HEADER_INTS;
pub use utf8_stream::Utf8Stream;

/// The first int32 of a tokenizer file.
pub const TOKENIZER_MAGIC: u32 = 20_240_328;
/// GPT-2's tokens: version 1 files hold no end-of-text id, and llm.c reads them only with this
/// many tokens, the last of them end-of-text.
const GPT2_TOKENS: usize = 50_257;
/// The largest file read, so that a device or a wrong file is not read without end: GPT-2's is
/// about 0.4 MiB, and 200 000 tokens (more than the largest vocabularies in use) of 255 bytes
/// each would still fit.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// Every token's bytes, and which token is end-of-text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenTable {
    /// The tokens' bytes, one after another.
    bytes: Vec<u8>,
    /// Where token `i`'s bytes end (they start where token `i - 1`'s end).
    ends: Vec<usize>,
    end_of_text: usize,
}

impl TokenTable {
    /// Reads and checks the tokenizer file at `path`.
    pub fn read(path: &Path) -> Result<TokenTable> {
        let io = |source| Error::Io { path: path.to_owned(), source };
        let mut contents = Vec::new();
        std::fs::File::open(path).map_err(io)?.take(MAX_FILE_BYTES + 1).read_to_end(&mut contents).map_err(io)?;
        if contents.len() as u64 > MAX_FILE_BYTES {
            return Err(Error::Dataset(format!(
                "{}: more than {} MiB, far past any llm.c tokenizer file",
                path.display(),
                MAX_FILE_BYTES >> 20
            )));
        }
        Self::parse(&contents).map_err(|why| Error::Dataset(format!("{}: {why}", path.display())))
    }

    /// Checks `contents` as a tokenizer file; the error says what is wrong, without the name.
    pub fn parse(contents: &[u8]) -> std::result::Result<TokenTable, String> {
        let header_bytes = HEADER_INTS * 4;
        let Some((header, mut rest)) = contents.split_at_checked(header_bytes) else {
            return Err(format!(
                "{} bytes, shorter than the {header_bytes}-byte header of llm.c's tokenizer file",
                contents.len()
            ));
        };
        let int = |i: usize| u32::from_le_bytes(header[4 * i..4 * i + 4].try_into().expect("four bytes"));
        match int(0) {
            TOKENIZER_MAGIC => {}
            magic if magic as i32 == crate::token_shards::MAGIC => {
                return Err("a token shard (magic 20240520), not a tokenizer file: shards are data to train on".into())
            }
            other => {
                let expected = format!("the magic {TOKENIZER_MAGIC} of llm.c's tokenizer file (gpt2_tokenizer.bin)");
                return Err(format!("starts with {other}, not {expected}"));
            }
        }
        let tokens = int(2) as usize;
        let end_of_text = match int(1) {
            1 if tokens == GPT2_TOKENS => GPT2_TOKENS - 1,
            1 => return Err(format!("version 1 with {tokens} tokens: version 1 files hold GPT-2's {GPT2_TOKENS}")),
            2 => int(3) as usize,
            version => return Err(format!("version {version}; llm.c writes versions 1 and 2")),
        };
        if tokens == 0 {
            return Err("no tokens".into());
        }
        if end_of_text >= tokens {
            return Err(format!("its end-of-text token is {end_of_text}, past its {tokens} tokens"));
        }
        // Each token takes two bytes at least: a count no file of this size holds is refused before
        // anything is set aside for it.
        if tokens > rest.len() / 2 {
            return Err(format!(
                "its header counts {tokens} tokens, but the {} bytes after it hold {} at most",
                rest.len(),
                rest.len() / 2
            ));
        }
        let mut table =
            TokenTable { bytes: Vec::with_capacity(rest.len()), ends: Vec::with_capacity(tokens), end_of_text };
        for token in 0..tokens {
            let Some((&length, after)) = rest.split_first() else {
                return Err(format!("ends after {token} of its {tokens} tokens"));
            };
            if length == 0 {
                return Err(format!("token {token} has no bytes (llm.c's tokens have at least one)"));
            }
            let Some((piece, after)) = after.split_at_checked(usize::from(length)) else {
                return Err(format!("ends inside token {token}, of {length} bytes"));
            };
            table.bytes.extend_from_slice(piece);
            table.ends.push(table.bytes.len());
            rest = after;
        }
        if !rest.is_empty() {
            return Err(format!("{} bytes after the last of its {tokens} tokens", rest.len()));
        }
        Ok(table)
    }

    /// The number of tokens (GPT-2's: 50257).
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds no token (never, for a table `read` or `parse` returned).
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Token `token`'s bytes. Panics past `len()`.
    pub fn bytes(&self, token: usize) -> &[u8] {
        let start = if token == 0 { 0 } else { self.ends[token - 1] };
        &self.bytes[start..self.ends[token]]
    }

    /// The end-of-text token (`<|endoftext|>`, GPT-2's 50256), where llm.c's samples start.
    pub fn end_of_text(&self) -> usize {
        self.end_of_text
    }
}

/// A tokenizer file of `pieces`, as llm.c's `train_gpt2.py` writes one (version 2): for tests and
/// for tools that make their own tables.
pub fn write_table(pieces: &[&[u8]], end_of_text: usize) -> std::result::Result<Vec<u8>, String> {
    if let Some((token, piece)) = pieces.iter().enumerate().find(|(_, p)| p.is_empty() || p.len() > 255) {
        return Err(format!("token {token} has {} bytes; a tokenizer file holds 1 to 255", piece.len()));
    }
    if end_of_text >= pieces.len() {
        return Err(format!("end-of-text token {end_of_text} is past the {} tokens", pieces.len()));
    }
    let count =
        u32::try_from(pieces.len()).map_err(|_| format!("{} tokens: a header counts 2^32 at most", pieces.len()))?;
    let mut header = [0u32; HEADER_INTS];
    // `end_of_text < count`, so it fits too.
    header[..4].copy_from_slice(&[TOKENIZER_MAGIC, 2, count, end_of_text as u32]);
    let mut file: Vec<u8> = header.iter().flat_map(|i| i.to_le_bytes()).collect();
    for piece in pieces {
        file.push(piece.len() as u8);
        file.extend_from_slice(piece);
    }
    Ok(file)
}

#[cfg(test)]
mod tests;
