//! The names in a checkpoint folder: the step directories (`step-00000010`, by the step a run
//! resumed from them starts at) and `latest`, the file naming the newest complete one. The save,
//! the load and the claim of a folder all go by these.

use std::path::{Path, PathBuf};

/// The file naming the newest complete step directory.
pub const LATEST: &str = "latest";

/// `latest`'s next version while it is written (`durable::temporary`).
pub const LATEST_TMP: &str = "latest.tmp";

/// A step directory's record of the step, the run and its files' checksums, written last.
pub const STATE_FILE: &str = "state.json";

/// The optimizer state's file in each step folder.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";

/// The lock a run holds on the folder it saves to.
pub const LOCK_FILE: &str = ".lock";

/// Where a run replacing another's checkpoints (`SaveConfig::overwrite`) keeps them until its
/// own first checkpoint is published.
pub const REPLACED: &str = ".replaced";

/// The name of the step directory of a checkpoint that resumes at `step`.
pub fn step_dir_name(step: u64) -> String {
    format!("step-{step:08}")
}

/// The step of a step directory's name; `None` for any other name (`latest`, a stray file, a
/// path).
pub fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix("step-")?.parse().ok()
}

/// The checkpoint folder whose own file `path` is, if any: `latest`, the lock, the pointer's
/// temporary file or a step directory of a folder whose `latest` names one of its step
/// directories, or anything inside such a step directory.
pub fn owner_folder(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let folder = path.parent()?;
    let own = [LATEST, LATEST_TMP, LOCK_FILE, REPLACED].contains(&name) || step_of(name).is_some();
    if own && is_checkpoint_folder(folder) {
        return Some(folder.to_path_buf());
    }
    let above = folder.parent()?;
    let in_a_step = folder.file_name()?.to_str().and_then(step_of).is_some();
    (in_a_step && is_checkpoint_folder(above)).then(|| above.to_path_buf())
}

/// Where `dir`'s checkpoints wait while a run replaces them, if it holds any: for the messages of
/// a folder found without a `latest`.
pub(crate) fn set_aside(dir: &Path) -> Option<PathBuf> {
    let aside = dir.join(REPLACED);
    aside.join(LATEST).symlink_metadata().is_ok().then_some(aside)
}

/// Whether `dir` is a checkpoint folder: its `latest` names a step directory it holds.
pub(super) fn is_checkpoint_folder(dir: &Path) -> bool {
    read_latest(dir).is_ok_and(|name| dir.join(name).is_dir())
}

/// The `step-N` name `dir`'s `latest` holds, or what it holds instead. Read no further than a
/// name, and only from a regular file: `latest` may be anything. It is opened without waiting
/// (a FIFO would wait for a writer), its kind checked on the open file, and at most a name's
/// length read, since a file's stated length may understate it (`/proc` files state 0).
pub fn read_latest(dir: &Path) -> std::result::Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(LATEST);
    let shown = path.display();
    let cannot = |e: std::io::Error| {
        format!("no checkpoint in {}: cannot read {shown}: {e}{}", dir.display(), one_of_a_folder(dir))
    };
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        let kind = crate::process::file_kind::kind_of(&meta.file_type()).unwrap_or("something other than a file");
        return Err(format!("{shown} is {kind}, not a file naming a checkpoint"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_LATEST_BYTES + 1).read_to_end(&mut bytes).map_err(cannot)?;
    match std::str::from_utf8(&bytes).map(str::trim) {
        Ok(name) if step_of(name).is_some() => Ok(name.to_string()),
        Ok(name) if bytes.len() as u64 <= MAX_LATEST_BYTES => {
            Err(format!("{shown}: `{name}` is not a checkpoint directory name"))
        }
        _ => {
            // A stated length short of what was read (a `/proc` file's 0) is no count.
            let read = bytes.len() as u64;
            let size =
                if meta.len() >= read { meta.len().to_string() } else { format!("more than {MAX_LATEST_BYTES}") };
            Err(format!("{shown}: {size} bytes that are no checkpoint directory name (`step-N`): was it written over?"))
        }
    }
}

/// Where `dir` is a step directory of a checkpoint folder (`ck/step-00000002`), a hint to give
/// the folder; otherwise nothing.
fn one_of_a_folder(dir: &Path) -> String {
    if dir.is_file() {
        return format!(
            " ({} is a file, not a checkpoint folder: a parameters file gives a run its first parameters, and is \
             not resumed from)",
            dir.display()
        );
    }
    let step_dir = dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| step_of(n).is_some());
    match dir.parent().filter(|folder| step_dir && is_checkpoint_folder(folder)) {
        Some(folder) => format!(" ({} is one checkpoint of the folder {}: give that)", dir.display(), folder.display()),
        None => String::new(),
    }
}

/// The most a `latest` pointer holds: `step-` and a `u64`, a line end and room to spare.
const MAX_LATEST_BYTES: u64 = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_is_read_no_further_than_a_name() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("step-00000004")).unwrap();
        std::fs::write(root.path().join(LATEST), "step-00000004\n").unwrap();
        assert_eq!(read_latest(root.path()).unwrap(), "step-00000004");
        let step = root.path().join("step-00000004");
        let err = read_latest(&step).unwrap_err();
        let hint = format!("({} is one checkpoint of the folder {}: give that)", step.display(), root.path().display());
        assert!(err.starts_with("no checkpoint in") && err.ends_with(&hint), "{err}");
        std::fs::write(root.path().join(LATEST), "x".repeat(10_000)).unwrap();
        let err = read_latest(root.path()).unwrap_err();
        assert!(
            err.ends_with("10000 bytes that are no checkpoint directory name (`step-N`): was it written over?"),
            "{err}"
        );
        // A file whose stated length is 0 but which holds more.
        std::fs::remove_file(root.path().join(LATEST)).unwrap();
        std::os::unix::fs::symlink("/proc/self/maps", root.path().join(LATEST)).unwrap();
        let err = read_latest(root.path()).unwrap_err();
        assert!(
            err.ends_with("more than 64 bytes that are no checkpoint directory name (`step-N`): was it written over?"),
            "{err}"
        );
    }

    #[test]
    fn a_checkpoint_folders_own_files_are_told_from_others_beside_them() {
        let root = tempfile::tempdir().unwrap();
        let ck = root.path().join("ck");
        std::fs::create_dir_all(ck.join("step-00000004")).unwrap();
        std::fs::write(ck.join(LATEST), "step-00000004\n").unwrap();
        for own in [LATEST, LATEST_TMP, LOCK_FILE, "step-00000009", "step-00000004/model.safetensors"] {
            assert_eq!(owner_folder(&ck.join(own)), Some(ck.clone()), "{own}");
        }
        for other in ["notes.txt", "exp2/trace.json", "latest/x"] {
            assert_eq!(owner_folder(&ck.join(other)), None, "{other}");
        }
        // A `latest` that names no step folder here, or that is no small file, makes no checkpoint
        // folder, and a FIFO of that name is not opened.
        let other = root.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join(LATEST), "step-00000001").unwrap();
        assert_eq!(owner_folder(&other.join(LATEST)), None);
        std::fs::remove_file(other.join(LATEST)).unwrap();
        let fifo = std::ffi::CString::new(other.join(LATEST).to_str().unwrap()).unwrap();
        // SAFETY: `fifo` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(owner_folder(&other.join(LATEST)), None);
    }

    #[test]
    fn step_directories_are_named_by_their_step_and_nothing_else_is_one() {
        assert_eq!(step_dir_name(10), "step-00000010");
        assert_eq!(step_of(&step_dir_name(123_456_789)), Some(123_456_789));
        for other in [LATEST, "step-", "step-x", "step-1/..", "../step-1", "model.safetensors"] {
            assert_eq!(step_of(other), None, "{other}");
        }
    }
}
