//! Taking a checkpoint folder for a run: one run at a time (an advisory lock naming its holder),
//! and never over another run's checkpoints unless the run continues them or was told to
//! replace them. Those it replaces are set aside once the run has passed every check and trains
//! (`DirLock::replace_old`), and removed when its first checkpoint is published: a run refused at
//! start-up (a checkpoint that does not load, a missing GPU), or one that fails or is killed
//! before its first save, leaves them to be put back, as its end or the next claim does.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::layout::{step_dir_name, step_of, LATEST, LOCK_FILE, REPLACED, STATE_FILE};
use super::lock::{lock, name_holder, retried, RELOCK_TRIES};
use crate::error::{Error, Result};
use crate::process::output_paths;

/// Held for the run: while it lives, another run's `claim` of the folder fails.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    dir: PathBuf,
    /// Another run's `latest` and step folders, to set aside before this run's first step.
    old: Vec<String>,
    /// The folder and those above it, when this run made them: removed again with the lock if
    /// the run saved nothing (it was refused, or failed before its first save).
    made: output_paths::MadeFolders,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // A run that published nothing leaves the checkpoints it was to replace as they were.
        let _ = put_back_replaced(&self.dir);
        let only_the_lock = || {
            std::fs::read_dir(&self.dir)
                .is_ok_and(|entries| entries.filter_map(|e| e.ok()).all(|e| e.file_name() == LOCK_FILE))
        };
        if self.made.any() && only_the_lock() {
            // The folders themselves go when `made` is dropped, right after.
            let _ = std::fs::remove_file(self.dir.join(LOCK_FILE));
        }
    }
}

impl DirLock {
    /// Sets aside the checkpoints of the run this one replaces (`SaveConfig::overwrite`), if any,
    /// in `REPLACED`, which this run's first published checkpoint removes; on rank 0, right
    /// before the first step.
    pub fn replace_old(&mut self) -> Result<()> {
        let old = std::mem::take(&mut self.old);
        if old.is_empty() {
            return Ok(());
        }
        let aside = self.dir.join(REPLACED);
        std::fs::create_dir(&aside).map_err(|source| Error::Io { path: aside.clone(), source })?;
        // `latest` first, and back last (`put_back_replaced`): wherever a kill stops the moves,
        // the folder has no `latest` while `.replaced` holds any of them, so they are put back.
        let (pointer, folders): (Vec<String>, Vec<String>) = old.into_iter().partition(|name| name == LATEST);
        for name in pointer.into_iter().chain(folders) {
            let (from, to) = (self.dir.join(&name), aside.join(&name));
            std::fs::rename(&from, &to).map_err(|source| Error::Io { path: from, source })?;
        }
        Ok(())
    }
}

/// Puts back the checkpoints a replacing run set aside in `dir` (`DirLock::replace_old`) and
/// ended, or was killed, before replacing: unless `dir` has a `latest` of its own, which means
/// that run published a checkpoint and they are removed. A step folder of the replacing run's
/// unfinished save gives way to the one set aside under its name.
pub(super) fn put_back_replaced(dir: &Path) -> Result<()> {
    let aside = dir.join(REPLACED);
    match aside.symlink_metadata() {
        Err(_) => return Ok(()),
        Ok(found) if !found.is_dir() => {
            return Err(Error::Checkpoint(format!(
                "{} is in the way: a run replacing this folder's checkpoints keeps them there until its first save; \
                 remove it",
                aside.display()
            )))
        }
        Ok(_) => {}
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    if dir.join(LATEST).symlink_metadata().is_ok() {
        return std::fs::remove_dir_all(&aside).map_err(io(&aside));
    }
    let mut names: Vec<std::ffi::OsString> = Vec::new();
    for entry in std::fs::read_dir(&aside).map_err(io(&aside))? {
        names.push(entry.map_err(io(&aside))?.file_name());
    }
    // `latest` last: until it is back, a stop here leaves the rest to be put back next time.
    names.sort_by_key(|name| name == LATEST);
    for name in names {
        let (from, to) = (aside.join(&name), dir.join(&name));
        if to.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            std::fs::remove_dir_all(&to).map_err(io(&to))?;
        }
        std::fs::rename(&from, &to).map_err(io(&from))?;
    }
    std::fs::remove_dir(&aside).map_err(io(&aside))
}

/// Claims `dir` for this run's checkpoints (rank 0, before step 1). `continues` says the run
/// resumes from this very folder; `overwrite` allows replacing another run's checkpoints;
/// `last_step` is the step of the last checkpoint the run will write, whose path is its longest.
pub fn claim(dir: &Path, continues: bool, overwrite: bool, last_step: u64) -> Result<DirLock> {
    let mut made = output_paths::MadeFolders::default();
    // A run refused on a folder it made removes the lock and the folder as it ends: a run that
    // opened the lock just before may then hold the lock of a file no longer there, or of a
    // folder made again since. It takes the lock again, on the file now in place.
    let file = retried(RELOCK_TRIES, || {
        made.extend(output_paths::check_dir(dir, "checkpoint folder")?);
        lock(dir)
    })?;
    let Some(file) = file else {
        return Err(Error::Checkpoint(format!(
            "{}: its lock file was removed and made again {RELOCK_TRIES} times while this run took it; \
             is another program cleaning the folder?",
            dir.display()
        )));
    };
    // Held from here on, so that a refusal below still removes the lock and the folders made.
    let mut lock = DirLock { _file: file, dir: dir.to_path_buf(), old: Vec::new(), made };
    longest_path_fits(dir, last_step)?;
    pointer_not_blocked(dir)?;
    name_holder(&mut lock._file, dir, "")?;
    // A run that was to replace this folder's checkpoints and was killed before its first save.
    put_back_replaced(dir)?;
    if continues && !overwrite {
        newer_than_latest_refused(dir)?;
    }
    let old = if continues { Vec::new() } else { checkpoints_in(dir) };
    if !old.is_empty() && !overwrite {
        // Without a `latest` naming one of its step folders nothing can be resumed: step folders
        // a save left unfinished, or a folder copied in part.
        let advice = if super::layout::is_checkpoint_folder(dir) {
            format!("continue that run with `TrainConfig::resume` {}", dir.display())
        } else {
            "no `latest` names one of its step folders (a save that did not finish, or a folder copied in part): \
             remove them"
                .to_string()
        };
        return Err(Error::Checkpoint(format!(
            "{} holds another run's checkpoints ({}): {advice}, or replace them with `SaveConfig::overwrite`",
            dir.display(),
            old.join(", ")
        )));
    }
    lock.old = old;
    Ok(lock)
}

/// A run continuing `dir` resumes from its `latest`, and its first save removes every step folder
/// after that one as the leftover of a save a crash cut short before publishing it. Such a
/// leftover was written after `latest`; a whole checkpoint after the step `latest` names but
/// older than `latest` itself was there when `latest` was set back (by hand, as the advice for a
/// damaged one says): refused unless the run may replace it.
fn newer_than_latest_refused(dir: &Path) -> Result<()> {
    let Some(latest) = super::layout::read_latest(dir).ok().as_deref().and_then(step_of) else { return Ok(()) };
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let Some(set_at) = modified(&dir.join(LATEST)) else { return Ok(()) };
    let newer: Vec<String> = super::latest::whole_steps(dir)
        .into_iter()
        .filter(|name| step_of(name).is_some_and(|step| step > latest))
        .filter(|name| modified(&dir.join(name).join(STATE_FILE)).is_some_and(|written| written <= set_at))
        .collect();
    if newer.is_empty() {
        return Ok(());
    }
    Err(Error::Checkpoint(format!(
        "{}: its `latest` names step {latest}, but it also holds whole checkpoints after that one ({}): continuing from \
         step {latest} in this folder would remove them; save into another folder, or replace them with \
         `SaveConfig::overwrite`",
        dir.display(),
        newer.join(", ")
    )))
}

/// What a save writes before it publishes `latest` must be free for it: a crash's leftover file
/// is replaced, anything else (a folder, a link) would fail every save at the end of its step.
fn pointer_not_blocked(dir: &Path) -> Result<()> {
    let tmp = super::durable::temporary(&dir.join(LATEST));
    match std::fs::symlink_metadata(&tmp) {
        Ok(found) if !found.is_file() => Err(Error::Checkpoint(format!(
            "{} is in the way: each save writes the new `{LATEST}` there first; remove it",
            tmp.display()
        ))),
        _ => Ok(()),
    }
}

/// The longest path a checkpoint of the run writes (`dir/step-N/optimizer.safetensors` at its
/// last step) can be created: a folder whose name fits the probe of `check_dir` may still be too
/// long for the files inside it, found then rather than at the first save after hours. The
/// probe is a hidden folder of the step folder's length, removed at once.
fn longest_path_fits(dir: &Path, last_step: u64) -> Result<()> {
    let step = step_dir_name(last_step);
    let probe = dir.join(format!(".{}", "p".repeat(step.len().saturating_sub(1))));
    let file = probe.join(LONGEST_FILE);
    let made = std::fs::create_dir(&probe).and_then(|()| std::fs::File::create(&file));
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir(&probe);
    made.map(drop).map_err(|e| {
        Error::Checkpoint(format!(
            "{}: the checkpoint's files cannot be created there ({}, {} characters): {e}",
            dir.display(),
            dir.join(&step).join(LONGEST_FILE).display(),
            dir.join(&step).join(LONGEST_FILE).as_os_str().len()
        ))
    })
}

/// The longest name of a checkpoint's files.
const LONGEST_FILE: &str = "optimizer.safetensors";

/// `latest` and the `step-*` folders in `dir`, sorted.
fn checkpoints_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name == LATEST || step_of(name).is_some())
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_lost_to_its_removal_is_taken_again_and_only_so_often() {
        let mut calls = 0;
        let second = retried(RELOCK_TRIES, || {
            calls += 1;
            Ok((calls == 2).then_some("locked"))
        });
        assert_eq!((second.unwrap(), calls), (Some("locked"), 2));
        calls = 0;
        let never = retried(RELOCK_TRIES, || {
            calls += 1;
            Ok(None::<()>)
        });
        assert_eq!((never.unwrap(), calls), (None, RELOCK_TRIES));
    }

    #[test]
    fn set_aside_checkpoints_are_put_back_over_an_unfinished_save_and_a_file_there_is_refused() {
        let _children = crate::test_children::one_at_a_time();
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ck");
        let aside = dir.join(REPLACED);
        std::fs::create_dir_all(aside.join("step-00000002")).unwrap();
        std::fs::write(aside.join("step-00000002").join(STATE_FILE), "set aside").unwrap();
        std::fs::write(aside.join(LATEST), "step-00000002").unwrap();
        // The replacing run's own unfinished save, under the same name.
        std::fs::create_dir(dir.join("step-00000002")).unwrap();
        let error = claim(&dir, false, false, 10).unwrap_err().to_string();
        assert!(error.contains("holds another run's checkpoints (latest, step-00000002)"), "{error}");
        assert!(!aside.exists());
        assert_eq!(std::fs::read_to_string(dir.join("step-00000002").join(STATE_FILE)).unwrap(), "set aside");
        // A replacing run that published has replaced them: they go.
        std::fs::create_dir(&aside).unwrap();
        std::fs::write(aside.join(LATEST), "step-00000001").unwrap();
        put_back_replaced(&dir).unwrap();
        assert!(!aside.exists() && std::fs::read_to_string(dir.join(LATEST)).unwrap() == "step-00000002");
        std::fs::write(&aside, "in the way").unwrap();
        let error = claim(&dir, true, false, 10).unwrap_err().to_string();
        assert!(error.contains(".replaced is in the way"), "{error}");
    }

    #[test]
    fn a_folder_that_was_there_keeps_its_lock_file() {
        let _children = crate::test_children::one_at_a_time();
        let root = tempfile::tempdir().unwrap();
        drop(claim(root.path(), false, false, 10).unwrap());
        assert!(root.path().join(LOCK_FILE).exists());
    }

    #[test]
    fn a_run_that_opened_the_lock_as_its_holder_removed_it_takes_the_new_one() {
        use crate::checkpoint::lock::{open_lock, take};
        let _children = crate::test_children::one_at_a_time();
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("new").join("ck");
        let first = claim(&dir, false, false, 10).unwrap();
        let opened = open_lock(&dir).unwrap().unwrap();
        drop(first); // refused: its lock file and folders are removed
        assert!(take(opened, &dir).unwrap().is_none(), "the removed file's lock is not the folder's");
        let opened = open_lock(&dir).unwrap();
        assert!(opened.is_none(), "the folder is gone, so is its lock file");
        // The next try makes the folder again and holds its lock alone.
        let second = claim(&dir, false, false, 10).unwrap();
        let third = take(open_lock(&dir).unwrap().unwrap(), &dir).unwrap_err().to_string();
        assert!(third.contains("in use by another run"), "{third}");
        drop(second);
    }
}
