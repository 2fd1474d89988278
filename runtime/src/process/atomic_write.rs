//! Replacing a file whole or not at all: a run's outputs (the parameters, the trace, the
//! timeline, the profile) are written beside their file and renamed over it, so that a full disk
//! or a kill midway leaves the previous file, never part of a new one.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use super::output_paths::{identity, written_in_place};

/// Writes a file through `write` into a temporary file next to the file `path` names (through a
/// link, the file it points to), syncs it, renames it over that file and syncs the folder.
/// Something other than a file there (a device, a pipe, a terminal) cannot be replaced, and
/// neither can a file reached through an open descriptor (`/dev/stdout` of `>> job.log`,
/// `/proc/self/fd/N`), whose owner means it to be written to, not swapped: those are written in
/// place, appended to. `before_rename` runs once the new file is synced (the fault harness stops
/// a save there).
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    before_rename: impl FnOnce(),
) -> io::Result<()> {
    // Through links, to a file that may not exist yet.
    let target = identity(path);
    if written_in_place(path) {
        let mut out = BufWriter::new(OpenOptions::new().append(true).open(path)?);
        write(&mut out)?;
        return out.flush();
    }
    let folder = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    // The checks before step 1 made the folder and removed it again (see `output_paths`).
    std::fs::create_dir_all(folder)?;
    let tmp = folder.join(temporary_name(&target));
    // A leftover of a killed write is replaced; whatever else is there (a link planted at the
    // name) is removed, never written through: the file is made new, not opened.
    let fresh = || OpenOptions::new().write(true).create_new(true).open(&tmp);
    let opened = match fresh() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => std::fs::remove_file(&tmp).and_then(|()| fresh()),
        other => other,
    };
    let written = opened.and_then(|file| {
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_all()?;
        before_rename();
        std::fs::rename(&tmp, &target)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    File::open(folder)?.sync_all()
}

/// `.<name>.tmp`, hidden and the same on every write of one file (a write killed midway leaves
/// it for the next to replace), with the name cut to fit the file system's 255 bytes.
fn temporary_name(target: &Path) -> OsString {
    let name = target.file_name().map_or(&[][..], |n| n.as_bytes());
    let mut tmp = b".".to_vec();
    tmp.extend_from_slice(&name[..name.len().min(240)]);
    tmp.extend_from_slice(b".tmp");
    OsString::from_vec(tmp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::output_paths::names_a_descriptor;

    #[test]
    fn a_link_at_the_temporary_name_is_replaced_not_written_through() {
        let root = tempfile::tempdir().unwrap();
        let (path, victim) = (root.path().join("p.safetensors"), root.path().join("victim"));
        std::fs::write(&victim, b"someone else's").unwrap();
        std::os::unix::fs::symlink(&victim, root.path().join(temporary_name(&path))).unwrap();
        write_atomically(&path, |f| f.write_all(b"this run's"), || {}).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"someone else's");
        assert_eq!(std::fs::read(&path).unwrap(), b"this run's");
        assert!(!root.path().join(temporary_name(&path)).exists(), "the link is gone with the write");
    }

    #[test]
    fn a_write_replaces_the_file_whole_and_leaves_nothing_beside_it() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("p.safetensors");
        std::fs::write(&path, b"the previous run's").unwrap();
        write_atomically(&path, |f| f.write_all(b"this run's"), || {}).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"this run's");
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1, "no temporary file is left");
        // Through a link, the file it names is replaced and the link stays.
        let link = root.path().join("link.safetensors");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        write_atomically(&link, |f| f.write_all(b"through the link"), || {}).unwrap();
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&path).unwrap(), b"through the link");
        // Through a link to a file not there yet, that file is written and the link stays.
        let ahead = root.path().join("ahead.json");
        std::os::unix::fs::symlink("later.json", &ahead).unwrap();
        write_atomically(&ahead, |f| f.write_all(b"first"), || {}).unwrap();
        assert!(ahead.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(root.path().join("later.json")).unwrap(), b"first");
        std::fs::remove_file(&ahead).unwrap();
        std::fs::remove_file(root.path().join("later.json")).unwrap();
        // A name as long as the file system takes still has a temporary name it takes.
        let longest = root.path().join("a".repeat(255));
        write_atomically(&longest, |f| f.write_all(b"long"), || {}).unwrap();
        assert_eq!(std::fs::read(&longest).unwrap(), b"long");
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 3);
    }

    #[test]
    fn a_file_reached_through_an_open_descriptor_is_appended_to_not_replaced() {
        // `--save-params /dev/stdout >> job.log`: the log keeps what it had.
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("job.log");
        std::fs::write(&log, b"earlier lines\n").unwrap();
        let open = OpenOptions::new().append(true).open(&log).unwrap();
        let descriptor = std::path::PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&open)));
        write_atomically(&descriptor, |f| f.write_all(b"parameters"), || {}).unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), b"earlier lines\nparameters");
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1, "nothing renamed beside it");
        // A link in a folder of one's own to such a name is one too.
        let link = root.path().join("out");
        std::os::unix::fs::symlink(&descriptor, &link).unwrap();
        write_atomically(&link, |f| f.write_all(b"!"), || {}).unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), b"earlier lines\nparameters!");
        assert!(!names_a_descriptor(&root.path().join("plain")));
        assert!(!names_a_descriptor(Path::new("/dev/shm/params.safetensors")));
        assert!(names_a_descriptor(Path::new("/dev/stdout")));
    }
}
