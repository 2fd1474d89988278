//! Output files and folders, checked before the first step: a run that can only fail to write
//! its result should fail in its first second, not after its last step.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// `path` can be created or replaced as a file: it is not a folder, its folder exists (it is
/// created if missing) and takes a new file, and, when nothing is there yet, a file of that very
/// name can be made (a name too long for the file system fails here, not after the run). What is
/// written in place (`written_in_place`: `/dev/stdout`, a pipe) needs no folder: it must open for
/// writing (a pipe with no reader yet passes, as its writer will wait for one).
pub fn check_file(path: &Path, what: &str) -> Result<MadeFolders> {
    if path.is_dir() {
        return Err(Error::Config(format!("{what} {}: is a folder; give a file name", path.display())));
    }
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(Error::Config(format!(
            "{what} {}: names a folder (it ends with `/`); give a file name",
            path.display()
        )));
    }
    if written_in_place(path) {
        use std::os::unix::fs::OpenOptionsExt;
        let opened = std::fs::OpenOptions::new().append(true).custom_flags(libc::O_NONBLOCK).open(path);
        return match opened {
            Ok(_) => Ok(MadeFolders::default()),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(MadeFolders::default()),
            Err(e) => Err(Error::Config(format!("{what} {}: cannot be written: {e}", path.display()))),
        };
    }
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let made = check_dir(folder, what).map_err(|e| match e {
        Error::Config(why) => Error::Config(format!("{why} (the folder of {})", path.display())),
        other => other,
    })?;
    if path.symlink_metadata().is_ok() {
        return Ok(made); // A file (or a link to one) is there: it will be replaced or written.
    }
    std::fs::File::create_new(path)
        .and_then(|_| std::fs::remove_file(path))
        .map_err(|e| Error::Config(format!("{what} {}: cannot be created: {e}", path.display())))?;
    Ok(made)
}

/// The folders the checks made for outputs not yet written, outermost first. Those still empty
/// when it is dropped are removed again: a run that did not start leaves no trace in the file
/// system. Output files' folders are dropped as soon as they are checked (their writer makes
/// them again), so that a process killed meanwhile leaves none; a checkpoint folder is held for
/// the run, since it holds the run's lock.
#[derive(Debug, Default)]
#[must_use = "the folders are removed again when this is dropped"]
pub struct MadeFolders(Vec<PathBuf>);

impl MadeFolders {
    /// Adds the folders another check made (each list runs outermost first, so removing in
    /// reverse order removes a folder's children before it).
    pub fn extend(&mut self, mut other: MadeFolders) {
        self.0.append(&mut other.0);
    }

    /// Whether this check made any folder (the output's folder did not exist before the run).
    pub fn any(&self) -> bool {
        !self.0.is_empty()
    }
}

impl Drop for MadeFolders {
    fn drop(&mut self) {
        for folder in self.0.iter().rev() {
            // Fails, as meant, on a folder that holds anything.
            let _ = std::fs::remove_dir(folder);
        }
    }
}

/// The file or folder `path` names, as one absolute path whatever way it is written: resolved
/// through links where it exists, else its folder resolved and its name appended, after any
/// links to it (so that `out/t.json`, `./out/t.json` and a link to it compare equal, whether it
/// exists yet or not).
pub fn identity(path: &Path) -> PathBuf {
    if let Ok(resolved) = path.canonicalize() {
        return resolved;
    }
    // A link to a file not yet there is that file.
    let absolute = link_hops(path).pop().unwrap_or_else(|| path.to_path_buf());
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => parent.canonicalize().map_or(absolute.clone(), |p| p.join(name)),
        _ => absolute,
    }
}

/// Whether an output at `path` is written where it is, appended to, instead of replaced through
/// a new file beside it: something other than a file there (a device, a pipe, a terminal), or a
/// file reached through an open descriptor (`/dev/stdout` of `>> job.log`, `/proc/self/fd/N`,
/// `/dev/fd/N`), whose owner means it to be written to, not swapped.
pub fn written_in_place(path: &Path) -> bool {
    identity(path).metadata().is_ok_and(|m| !m.is_file()) || names_a_descriptor(path)
}

/// Whether `path`, or a link on the way from it, names an open descriptor (`/proc/..`,
/// `/dev/fd/N`, `/dev/stdout` and its kin) rather than a file of a folder (`/dev/shm/x` is one).
pub(super) fn names_a_descriptor(path: &Path) -> bool {
    let descriptor = |p: &Path| {
        p.starts_with("/proc")
            || p.starts_with("/dev/fd")
            || ["/dev/stdin", "/dev/stdout", "/dev/stderr"].iter().any(|d| p == Path::new(d))
    };
    link_hops(path).iter().any(|p| descriptor(p))
}

/// `path` made absolute, then each path the links it leads through name, in order (at most 40:
/// links may loop).
pub fn link_hops(path: &Path) -> Vec<PathBuf> {
    let mut at = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut hops = vec![at.clone()];
    for _ in 0..40 {
        let Ok(next) = std::fs::read_link(&at) else { break };
        let joined = at.parent().map_or(next.clone(), |folder| folder.join(&next));
        at = std::path::absolute(&joined).unwrap_or(joined);
        hops.push(at.clone());
    }
    hops
}

/// `dir` is a folder (created if missing, with the folders above it) that takes new files.
pub fn check_dir(dir: &Path, what: &str) -> Result<MadeFolders> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::Config(format!("{what} {}: exists and is not a folder", dir.display())));
    }
    // Through `..` a missing folder's path names one that exists (`new/../ck` is `ck`): such a
    // path is not taken apart, and nothing it makes is removed again.
    let plain = !dir.components().any(|c| c == std::path::Component::ParentDir);
    let mut missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|a| plain && !a.as_os_str().is_empty() && a.symlink_metadata().is_err())
        .map(Path::to_path_buf)
        .collect();
    missing.reverse();
    let made = MadeFolders(missing);
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Config(format!("{what} {}: the folder cannot be created: {e}", dir.display())))?;
    let probe = dir.join(format!(".overlap-write-test-{}", std::process::id()));
    std::fs::File::create(&probe)
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|e| Error::Config(format!("{what} {}: cannot write in this folder: {e}", dir.display())))?;
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_under_a_file_or_a_folder_in_place_of_a_file_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("plain");
        std::fs::write(&file, b"x").unwrap();
        let under_a_file = check_file(&file.join("trace.json"), "--trace").unwrap_err().to_string();
        assert!(
            under_a_file.contains("--trace") && under_a_file.contains("exists and is not a folder"),
            "{under_a_file}"
        );
        let folder = check_file(root.path(), "--save-params").unwrap_err().to_string();
        assert!(folder.contains("is a folder; give a file name"), "{folder}");
        // A folder not yet there, by its trailing `/`: nothing is made for it.
        let new_folder = root.path().join("new/");
        let named = check_file(&new_folder, "--timeline").unwrap_err().to_string();
        assert!(named.contains("names a folder (it ends with `/`); give a file name"), "{named}");
        assert!(!root.path().join("new").exists());
        let dir = check_dir(&file, "--save").unwrap_err().to_string();
        assert!(dir.contains("--save") && dir.contains("exists and is not a folder"), "{dir}");
    }

    /// A device or an open descriptor is written where it is: its folder (`/dev`, `/dev/fd`)
    /// need not take new files, which only root's may.
    #[test]
    fn what_is_written_in_place_needs_no_folder() {
        use std::os::fd::AsRawFd;
        let root = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(root.path().join("held.json")).unwrap();
        let descriptor = PathBuf::from(format!("/dev/fd/{}", file.as_raw_fd()));
        for path in [Path::new("/dev/null"), descriptor.as_path()] {
            assert!(written_in_place(path), "{}", path.display());
            let made = check_file(path, "--trace").unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!made.any());
        }
        assert!(!written_in_place(&root.path().join("held.json")));
        let missing = check_file(Path::new("/dev/fd/999999"), "--trace").unwrap_err().to_string();
        assert!(missing.contains("--trace /dev/fd/999999: cannot be written"), "{missing}");
    }

    #[test]
    fn a_link_to_a_file_not_yet_written_is_that_file() {
        let root = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("target.json", root.path().join("link.json")).unwrap();
        let target = identity(&root.path().join("target.json"));
        assert_eq!(identity(&root.path().join("link.json")), target);
        assert_eq!(identity(&root.path().join("./link.json")), target);
        // Links in a loop end somewhere, without hanging.
        std::os::unix::fs::symlink("b", root.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", root.path().join("b")).unwrap();
        let _ = identity(&root.path().join("a"));
    }

    #[test]
    fn a_missing_folder_is_created_and_removed_again_unless_written_to() {
        let root = tempfile::tempdir().unwrap();
        let made = check_file(&root.path().join("a/b/run.json"), "--trace").unwrap();
        assert!(root.path().join("a/b").is_dir());
        assert_eq!(std::fs::read_dir(root.path().join("a/b")).unwrap().count(), 0, "the probe file is removed");
        drop(made);
        assert!(!root.path().join("a").exists(), "a refused run leaves no empty folders");

        let mut made = check_file(&root.path().join("a/b/run.json"), "--trace").unwrap();
        made.extend(check_file(&root.path().join("a/c/t.json"), "--timeline").unwrap());
        std::fs::write(root.path().join("a/b/run.json"), b"written").unwrap();
        drop(made);
        assert!(root.path().join("a/b/run.json").is_file(), "a folder with an output is kept");
        assert!(!root.path().join("a/c").exists(), "the other, empty, is removed");
        assert!(check_file(&root.path().join("a/b/x.json"), "--trace").unwrap().0.is_empty(), "nothing new is made");
        // `new/../kept` is the folder `kept`, there before the run: it stays.
        std::fs::create_dir(root.path().join("kept")).unwrap();
        drop(check_dir(&root.path().join("new/../kept"), "--save").unwrap());
        assert!(root.path().join("kept").is_dir());
    }

    #[test]
    fn a_name_the_file_system_cannot_take_is_refused_and_an_existing_file_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let long = root.path().join(format!("{}.safetensors", "a".repeat(300)));
        let err = check_file(&long, "--save-params").unwrap_err().to_string();
        assert!(err.contains("--save-params") && err.contains("cannot be created"), "{err}");
        assert!(err.contains("too long"), "the system's reason is given: {err}");
        let there = root.path().join("params.safetensors");
        std::fs::write(&there, b"the previous run's").unwrap();
        let _made = check_file(&there, "--save-params").unwrap();
        assert_eq!(std::fs::read(&there).unwrap(), b"the previous run's");
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1, "nothing is left behind");
    }
}
