//! llm.c's token shard header (what identifies a shard and where its tokens begin), and the
//! writing of a shard.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// The first int32 of a shard's header.
pub const MAGIC: i32 = 20240520;
/// The version of the format with uint16 tokens.
pub const VERSION: i32 = 1;
/// Header length, in int32s.
pub const HEADER_INTS: usize = 256;

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

pub(super) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let partial = path.with_extension("partial");
    let mut file = std::fs::File::create(&partial).map_err(io)?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(io)?;
    std::fs::rename(&partial, path).map_err(io)
}
