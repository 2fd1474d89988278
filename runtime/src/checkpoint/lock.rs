//! A checkpoint folder's lock: an advisory `flock` on its `.lock` file, which names its holder.
//! A run holds it while it lives (`claim`), and a loop of one's own for each `checkpoint::save`
//! (`hold_for_save`), so that two writers never publish into one folder at once.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::layout::LOCK_FILE;
use crate::error::{Error, Result};

/// How often the lock is taken again when the file locked was removed meanwhile (by the run that
/// made the folder, ending).
pub(super) const RELOCK_TRIES: usize = 8;

/// What the lock file of a save of one's own says after its holder.
const SAVING: &str = " (`checkpoint::save`)";

/// How long a save waits for another process's save into the folder to end: every rank of a job
/// calling `checkpoint::save` then writes in turn (the later ones find the position published
/// and keep it), rather than failing or not by timing.
const SAVE_WAIT: Duration = Duration::from_secs(600);

/// How long a lock whose file names no save is still read again before the save is refused: a
/// holder writes its name right after locking, so for a moment the file says nothing, or names
/// the process that held the lock before.
const NAMING_WAIT: Duration = Duration::from_secs(5);

/// `attempt` until it gives a value, at most `tries` times; `None` if it never did.
pub(super) fn retried<T>(tries: usize, mut attempt: impl FnMut() -> Result<Option<T>>) -> Result<Option<T>> {
    for _ in 0..tries {
        if let Some(value) = attempt()? {
            return Ok(Some(value));
        }
    }
    Ok(None)
}

/// Opens and locks `dir/.lock`: an error when another process holds it, `None` when the file
/// locked is no longer the one at that path (or the folder is gone), so that the caller retries.
pub(super) fn lock(dir: &Path) -> Result<Option<File>> {
    match open_lock(dir)? {
        Some(file) => take(file, dir),
        None => Ok(None),
    }
}

/// Locks the opened lock file of `dir`: an error when another process holds it, `None` when it
/// was removed or replaced since it was opened.
pub(super) fn take(file: File, dir: &Path) -> Result<Option<File>> {
    match taken(file, dir) {
        Taken::Locked(file) => Ok(Some(file)),
        Taken::Moved => Ok(None),
        Taken::HeldBy(holder) => Err(held(dir, &holder)),
    }
}

/// Holds `dir`'s lock (the folder made first) while a loop of one's own saves into it
/// (`checkpoint::save`): two processes writing one step folder at once would write over each
/// other's files. Another save is waited for; a run holding the folder is refused, named, once
/// its name has stood for `NAMING_WAIT`.
pub(super) fn hold_for_save(dir: &Path) -> Result<File> {
    let started = Instant::now();
    let mut moved = 0;
    loop {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
        let attempt = open_lock(dir)?.map_or(Taken::Moved, |file| taken(file, dir));
        match attempt {
            Taken::Locked(mut file) => {
                name_holder(&mut file, dir, SAVING)?;
                return Ok(file);
            }
            Taken::Moved if moved < RELOCK_TRIES => moved += 1,
            Taken::Moved => {
                return Err(Error::Checkpoint(format!(
                    "{}: its lock file was removed and made again {RELOCK_TRIES} times while this save took it; is \
                     another program cleaning the folder?",
                    dir.display()
                )))
            }
            Taken::HeldBy(holder)
                if (holder.ends_with(SAVING) && started.elapsed() < SAVE_WAIT) || started.elapsed() < NAMING_WAIT =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Taken::HeldBy(holder) => return Err(held(dir, &holder)),
        }
    }
}

/// Writes who holds `dir`'s lock into its file, for the message of a process refused it (`how`:
/// what it holds it for, after the process).
pub(super) fn name_holder(file: &mut File, dir: &Path, how: &str) -> Result<()> {
    let path = dir.join(LOCK_FILE);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let holder = format!("process {} on {}{how}", std::process::id(), host.trim());
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(holder.as_bytes()))
        .map_err(|source| Error::Io { path, source })
}

/// An attempt at the lock.
enum Taken {
    Locked(File),
    /// The file locked was removed or replaced since it was opened, or the folder is gone.
    Moved,
    /// Another process holds it; what its file says of it.
    HeldBy(String),
}

fn taken(mut file: File, dir: &Path) -> Taken {
    // SAFETY: `file` is an open descriptor owned here; flock only takes an advisory lock on it,
    // released when the descriptor is closed (the holder is dropped).
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        return Taken::HeldBy(holder.trim().to_string());
    }
    if is_at(&file, &dir.join(LOCK_FILE)) {
        Taken::Locked(file)
    } else {
        Taken::Moved
    }
}

fn held(dir: &Path, holder: &str) -> Error {
    Error::Checkpoint(format!(
        "{} is in use by another run ({holder}): two runs cannot save into one folder",
        dir.display()
    ))
}

/// Opens (or creates) `dir/.lock`; `None` when the folder is gone.
pub(super) fn open_lock(dir: &Path) -> Result<Option<File>> {
    let path = dir.join(LOCK_FILE);
    let io = |source| Error::Io { path: path.clone(), source };
    // Never through a link: the lock is the folder's own file, and a link would have this run
    // truncate and rewrite whatever it points to.
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path);
    let file = match opened {
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Error::Checkpoint(format!(
                "{} is a symbolic link; the lock is a file of the checkpoint folder's own: remove the link",
                path.display()
            )))
        }
        // The folder was removed since it was checked (by the run that made it).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        other => other.map_err(io)?,
    };
    Ok(Some(file))
}

/// Whether the open `file` is the one `path` names now (not removed, nor replaced since).
fn is_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), path.symlink_metadata()) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}
