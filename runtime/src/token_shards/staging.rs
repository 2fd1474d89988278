//! Where `prepare` writes a text's shards before they go into their folder: a hidden folder
//! beside them (`.prepare-<name>.partial`), moved out of once every file is whole. A run that is
//! interrupted or fails leaves no shards that `--tokens` would read as a dataset, and `--tokens`
//! refuses a folder that still holds a staging folder (`unfinished`).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// `.prepare-<name>.partial`: hidden, so that listing the shards passes it by.
const PREFIX: &str = ".prepare-";
const SUFFIX: &str = ".partial";

/// The staging folder of the shards named `stem` in `out`, made anew: one that an earlier run
/// of this name left, which nothing ever read, is removed first.
pub(super) fn begin(out: &Path, stem: &str) -> Result<PathBuf> {
    let staging = out.join(format!("{PREFIX}{stem}{SUFFIX}"));
    match std::fs::remove_dir_all(&staging) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_at(&staging)(e)),
    }
    std::fs::create_dir_all(&staging).map_err(io_at(&staging))?;
    Ok(staging)
}

/// Moves `files` (in `staging`, in this order) into `out`, then removes `staging`: until it has
/// gone, `--tokens` refuses the folder. `out` is synced last, so that a crash after `prepare`
/// returns loses none of what it published.
pub(super) fn publish(staging: &Path, out: &Path, files: &[PathBuf]) -> Result<()> {
    for (from, to) in files.iter().zip(moved_into(out, files)) {
        std::fs::rename(from, &to).map_err(io_at(&to))?;
    }
    std::fs::remove_dir(staging).map_err(io_at(staging))?;
    std::fs::File::open(out).and_then(|folder| folder.sync_all()).map_err(io_at(out))
}

/// Removes `staging` and what it holds, as far as it can: the error that stopped the run says
/// what went wrong.
pub(super) fn abandon(staging: &Path) {
    let _ = std::fs::remove_dir_all(staging);
}

/// `files`' names in `out`.
pub(super) fn moved_into(out: &Path, files: &[PathBuf]) -> Vec<PathBuf> {
    files.iter().map(|f| out.join(f.file_name().expect("a file"))).collect()
}

/// The staging folder in `folder` that a `prepare` which did not finish left, if any.
pub(super) fn unfinished(folder: &Path) -> Option<PathBuf> {
    unfinished_but(folder, None)
}

/// `unfinished`, passing by the staging folder of the shards named `stem` (which `begin`
/// replaces), if given.
pub(super) fn unfinished_but(folder: &Path, stem: Option<&str>) -> Option<PathBuf> {
    let listed = std::fs::read_dir(folder).ok()?;
    let own = stem.map(|stem| format!("{PREFIX}{stem}{SUFFIX}"));
    listed.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        p.is_dir() && name.starts_with(PREFIX) && name.ends_with(SUFFIX) && Some(&name) != own.as_ref()
    })
}

/// An I/O error at `path`.
fn io_at(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_owned(), source }
}
