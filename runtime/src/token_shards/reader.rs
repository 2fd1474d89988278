//! One shard on disk: its header checked against the format and the file's length, its tokens
//! scanned once as they stream past, a chunk at a time (the largest id, the content hash the
//! ranks compare), and then each sample's window read where it lies. A dataset of many gigabytes
//! so holds none of its tokens in a rank's memory: the page cache, which the node's ranks share,
//! holds those read lately. A file that cannot be read at an offset (a pipe) is read whole once
//! instead.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::{HEADER_INTS, MAGIC, VERSION};
use crate::content_hash::ContentHash;
use crate::error::{Error, Result};

/// Bytes read at a time while a shard is scanned.
pub(super) const SCAN_CHUNK: usize = 1 << 20;

/// The most tokens' bytes a shard that is not a regular file (a pipe) may count: read whole, it
/// is held in memory.
const MAX_STREAMED_SHARD_BYTES: u64 = 1 << 30;

/// Files a process opens later for what is not a shard: the outputs', a checkpoint's.
const SPARE_FILES: u64 = 64;

/// Room for `shards` more files kept open beside those the process holds now (MPI's, earlier
/// shards') and a few it opens later: the soft limit on open files is raised toward the hard one
/// where it falls short (1024 by default, fewer than the shards of a large llm.c dataset); an
/// error says what the shards need where even the hard one is short.
pub(super) fn room_to_keep_open(shards: usize) -> Result<()> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given, which lives across the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Ok(()); // Unknown: the opens themselves say so if they fail.
    }
    let open_now = std::fs::read_dir("/proc/self/fd").map_or(0, |fds| fds.count()) as u64;
    let wanted = (shards as u64).saturating_add(open_now).saturating_add(SPARE_FILES);
    if limit.rlim_cur >= wanted {
        return Ok(());
    }
    let raised = libc::rlimit { rlim_cur: wanted.min(limit.rlim_max), rlim_max: limit.rlim_max };
    // SAFETY: setrlimit reads the struct it is given; a soft limit up to the hard one needs no
    // privilege.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0;
    // Short of the spare ones only, the shards still open: a later file's error says what it is.
    if set && raised.rlim_cur >= wanted - SPARE_FILES {
        return Ok(());
    }
    Err(Error::Dataset(format!(
        "{shards} token shards stay open while the run reads them, beside the {open_now} files this process holds, \
         and it may open {} (`ulimit -n`; at most {} without privilege): raise the limit, or join the shards into \
         fewer",
        limit.rlim_cur, limit.rlim_max
    )))
}

/// A checked shard, and where its tokens are read from.
pub(super) struct ShardFile {
    pub(super) path: PathBuf,
    /// Tokens after the header.
    pub(super) count: usize,
    /// The largest token id.
    pub(super) largest: u16,
    source: Source,
}

enum Source {
    /// Read at each window's offset.
    File(File),
    /// Not a regular file: its tokens, read once.
    Loaded(Vec<u16>),
}

impl ShardFile {
    /// Opens and checks the shard at `path`, adding its tokens to `hash` as `ContentHash::u32s`
    /// would from a slice of them.
    pub(super) fn open(path: &Path, hash: &mut ContentHash) -> Result<Self> {
        let (file, count, regular) = open_checked(path)?;
        let mut largest = 0;
        let mut sequence = hash.sequence();
        let source = if regular {
            read_tokens(&file, count, path, |tokens| {
                largest = largest.max(tokens.iter().copied().max().unwrap_or(0));
                sequence.u16s(tokens);
            })?;
            Source::File(file)
        } else {
            // Held in memory, from a stream whose header may count more than will ever come (or
            // that never ends): as much as a text from a pipe, at most.
            if 2 * count as u64 > MAX_STREAMED_SHARD_BYTES {
                return Err(Error::Dataset(format!(
                    "{}: its header counts {count} tokens ({} bytes), more than the {} MiB read from a pipe or a \
                     device at most; a larger shard is read from a file",
                    path.display(),
                    2 * count,
                    MAX_STREAMED_SHARD_BYTES >> 20
                )));
            }
            let tokens = read_body(path, file, count)?;
            largest = tokens.iter().copied().max().unwrap_or(0);
            sequence.u16s(&tokens);
            Source::Loaded(tokens)
        };
        sequence.finish();
        Ok(ShardFile { path: path.to_owned(), count, largest, source })
    }

    /// Tokens `at..at + out.len()` into `out`, through `bytes` (resized to twice `out`'s length
    /// once, then reused).
    pub(super) fn read(&self, at: usize, out: &mut [u16], bytes: &mut Vec<u8>) -> Result<()> {
        match &self.source {
            Source::Loaded(tokens) => out.copy_from_slice(&tokens[at..at + out.len()]),
            Source::File(file) => {
                bytes.resize(2 * out.len(), 0);
                let offset = (HEADER_INTS * 4 + 2 * at) as u64;
                file.read_exact_at(bytes, offset).map_err(|source| Error::Io { path: self.path.clone(), source })?;
                for (token, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *token = u16::from_le_bytes([pair[0], pair[1]]);
                }
            }
        }
        Ok(())
    }

    /// Whether the tokens are held in memory (a shard that is not a regular file).
    pub(super) fn is_loaded(&self) -> bool {
        matches!(self.source, Source::Loaded(_))
    }
}

/// The tokens of one shard, read whole (see `ShardFile` for a dataset's reading).
pub fn read_shard(path: &Path) -> Result<Vec<u16>> {
    let (file, count, _) = open_checked(path)?;
    read_body(path, file, count)
}

/// The shard at `path` opened, its header read and checked, and its length where the file has
/// one: the file (positioned after the header), the token count, and whether it is a regular file.
/// Only the header is read, so that a device that never ends (`/dev/zero`) is refused at its
/// first bytes.
fn open_checked(path: &Path) -> Result<(File, usize, bool)> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let bad = |why: String| Error::Dataset(format!("{}: {why}", path.display()));
    let mut file = File::open(path).map_err(io)?;
    let header_bytes = HEADER_INTS * 4;
    let mut header = Vec::with_capacity(header_bytes);
    (&mut file).take(header_bytes as u64).read_to_end(&mut header).map_err(io)?;
    if header.len() < header_bytes {
        return Err(bad(format!(
            "{} bytes, shorter than the {header_bytes}-byte header of a token shard (llm.c's format)",
            header.len()
        )));
    }
    let int = |i: usize| i32::from_le_bytes(header[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    if int(0) != MAGIC {
        // nanoGPT's `prepare.py` writes its tokens under these names, with no header at all.
        let nanogpt = match path.file_name().and_then(|n| n.to_str()) {
            Some("train.bin" | "val.bin") => {
                "; nanoGPT's train.bin and val.bin are bare uint16 tokens without one: the `prepare` example \
                 writes shards of the text they came from"
            }
            _ => "",
        };
        return Err(bad(format!(
            "magic number {}, a token shard starts with {MAGIC} (llm.c's format){nanogpt}",
            int(0)
        )));
    }
    if int(1) != VERSION {
        return Err(bad(format!("version {}, only version {VERSION} (uint16 tokens) is read", int(1))));
    }
    let count = usize::try_from(int(2)).map_err(|_| bad(format!("a token count of {}", int(2))))?;
    // A file's length is checked before its body is read (a damaged count reserves nothing).
    let file_length = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    if let Some(length) = file_length.filter(|&l| l != (header_bytes + 2 * count) as u64) {
        return Err(mismatch(path, count, length.saturating_sub(header_bytes as u64).to_string()));
    }
    Ok((file, count, file_length.is_some()))
}

/// The error for a body of another length than the header counts.
fn mismatch(path: &Path, count: usize, holds: String) -> Error {
    Error::Dataset(format!(
        "{}: the header counts {count} tokens ({} bytes), the file holds {holds} bytes after it",
        path.display(),
        2 * count
    ))
}

/// The `count` tokens after the header, read up to one byte past them (to tell that more follow
/// where the file's length is not known).
fn read_body(path: &Path, file: File, count: usize) -> Result<Vec<u16>> {
    let mut read = Vec::new();
    read_tokens(file.take(2 * count as u64 + 1), count, path, |tokens| read.extend_from_slice(tokens))?;
    Ok(read)
}

/// Reads a shard's body of `count` tokens from `reader`, `SCAN_CHUNK` bytes at a time, handing
/// each chunk's tokens to `each`; then checks that the body ends there: `count` tokens, no fewer,
/// no more.
fn read_tokens(mut reader: impl Read, count: usize, path: &Path, mut each: impl FnMut(&[u16])) -> Result<()> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    // A damaged count reserves no more than one chunk.
    let mut bytes = vec![0u8; SCAN_CHUNK.min(2 * count)];
    let mut tokens = vec![0u16; bytes.len() / 2];
    let mut left = count;
    while left > 0 {
        let n = left.min(tokens.len());
        reader.read_exact(&mut bytes[..2 * n]).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => mismatch(path, count, "fewer".to_string()),
            _ => io(e),
        })?;
        for (token, pair) in tokens.iter_mut().zip(bytes[..2 * n].chunks_exact(2)) {
            *token = u16::from_le_bytes([pair[0], pair[1]]);
        }
        each(&tokens[..n]);
        left -= n;
    }
    match reader.read(&mut [0u8; 1]).map_err(io)? {
        0 => Ok(()),
        _ => Err(mismatch(path, count, format!("more than {}", 2 * count))),
    }
}
