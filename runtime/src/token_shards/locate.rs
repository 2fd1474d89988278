//! Which files `--tokens` reads: a folder's shards, split by their names into training and
//! held-out ones, or one file and the held-out file named after it.

use std::path::{Path, PathBuf};

use super::names::{shard_number, split_part};
use crate::error::{Error, Result};

/// The training and validation shards of `path`: a folder's `.bin` files whose names end in
/// `train` or `val` (before their numbers; see `split_part`), each split in the order of their
/// numbers; or one training file and, when it exists, the file named as it is with `val` for
/// that `train`.
pub fn locate(path: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    // A bare file name's folder is the current one.
    let folder = if path.is_dir() {
        path
    } else {
        path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
    };
    if let Some(staging) = super::staging::unfinished(folder) {
        return Err(Error::Dataset(format!(
            "{}: a `prepare` that did not finish (interrupted, or stopped by an error) left {}, and the shards beside \
             it may be a part of its text: remove both and run `prepare` again",
            folder.display(),
            staging.display()
        )));
    }
    if path.is_dir() {
        let listed = std::fs::read_dir(path).map_err(|source| Error::Io { path: path.to_owned(), source })?;
        let mut names: Vec<PathBuf> = listed
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "bin"))
            .collect();
        // By number, not by name: llm.c's numbers need not be padded (`_9` before `_10`), and
        // `prepare`'s six digits grow a seventh after shard 999999.
        let file_name = |p: &PathBuf| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        names.sort_by_cached_key(|p| (shard_number(&file_name(p)).map(|(number, _)| number), file_name(p)));
        let split = |p: &PathBuf| split_part(&file_name(p)).map(|(_, train)| train);
        let (train, val): (Vec<PathBuf>, Vec<PathBuf>) =
            names.into_iter().filter(|p| split(p).is_some()).partition(|p| split(p) == Some(true));
        if train.is_empty() {
            return Err(Error::Dataset(format!(
                "{}: no token shard named *_train.bin or *_train_NNNNNN.bin in this folder",
                path.display()
            )));
        }
        // The name before the split: shards of two names are two datasets, not one.
        let stem = |p: &PathBuf| {
            let name = file_name(p);
            // Every file here has a split part (`locate` kept only those).
            split_part(&name).map(|(part, _)| name[..part.start].trim_end_matches(['_', '-', '.']).to_string())
        };
        let mut stems: Vec<String> = train.iter().chain(&val).filter_map(stem).collect();
        stems.sort();
        stems.dedup();
        if let [first, second, ..] = &stems[..] {
            return Err(Error::Dataset(format!(
                "{}: holds shards of {} names ({first:?}, {second:?}{}), read as one dataset they would mix two \
                 texts: give one file, or a folder of one name's shards",
                path.display(),
                stems.len(),
                if stems.len() > 2 { ", ..." } else { "" }
            )));
        }
        return Ok((train, val));
    }
    // The system's own words for a missing or unreadable file.
    if let Err(source) = std::fs::metadata(path) {
        return Err(Error::Io { path: path.to_owned(), source });
    }
    Ok((vec![path.to_owned()], val_namesake(path).filter(|p| p.exists()).into_iter().collect()))
}

/// The validation file that goes with one training file: its name with `val` for its `train`
/// part (`tiny_train_000002.bin`: `tiny_val_000002.bin`), whether it exists or not.
pub fn val_namesake(train: &Path) -> Option<PathBuf> {
    let name = train.file_name()?.to_string_lossy().to_string();
    match split_part(&name) {
        Some((part, true)) => Some(train.with_file_name(format!("{}val{}", &name[..part.start], &name[part.end..]))),
        _ => None,
    }
}

/// Whether `file`'s name marks it held out (a `val` part, as `split_part` reads it).
pub fn is_held_out_file(file: &Path) -> bool {
    file.file_name().is_some_and(|name| matches!(split_part(&name.to_string_lossy()), Some((_, false))))
}
