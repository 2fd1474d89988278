//! Writes that survive a crash at any instant: data is synced before it is published, and it is
//! published by an atomic rename of a small pointer file.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::{Error, Result};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// Creates `path` with `bytes`, not yet synced. Anything already there (a symbolic link, whose
/// target would otherwise be written) is an error.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<File> {
    write_new_with(path, |out| out.write_all(bytes))
}

/// Creates `path` and writes it through `write` (buffered), not yet synced; refuses what
/// `write_new` refuses.
pub fn write_new_with(path: &Path, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<File> {
    let file = OpenOptions::new().write(true).create_new(true).open(path).map_err(io(path))?;
    let mut out = BufWriter::new(file);
    write(&mut out).map_err(io(path))?;
    out.into_inner().map_err(|e| io(path)(e.into_error()))
}

/// Flushes a file's data and metadata to the device.
pub fn sync(file: &File, path: &Path) -> Result<()> {
    file.sync_all().map_err(io(path))
}

/// Makes the entries of `dir` (created, renamed files) durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Replaces `path` with `contents` atomically: `path.tmp` is written and synced, then renamed
/// over `path`. `between` runs after each of the two steps (fault injection).
pub fn replace_atomically(path: &Path, contents: &[u8], mut between: impl FnMut(Step)) -> Result<()> {
    let tmp = temporary(path);
    // A crash's leftover, or a link: removed (a link itself, never its target), not written through.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&tmp)(e)),
        _ => {}
    }
    let file = write_new(&tmp, contents)?;
    sync(&file, &tmp)?;
    between(Step::TemporaryWritten);
    std::fs::rename(&tmp, path).map_err(io(path))?;
    between(Step::Renamed);
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// The file `replace_atomically` writes before it renames it over `path`.
pub fn temporary(path: &Path) -> std::path::PathBuf {
    path.with_extension("tmp")
}

/// Where `replace_atomically` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    TemporaryWritten,
    Renamed,
}
