//! Reading a run's input files whole. A path may name something other than a file: a pipe
//! (`--text <(zcat book.gz)`, which is read as a file is) or a device, some of which never end
//! (`/dev/zero`), and `std::fs::read` would read those until memory runs out; a FIFO no program
//! writes to leaves its reader waiting.

use std::fs::FileType;
use std::io::Read;
use std::path::Path;

use super::file_kind::kind_of;
use crate::error::{Error, Result};

/// All of `path`: a file whole, a pipe or a device up to `limit` bytes, or `None` when it gives
/// more (of which no more than `limit + 1` are read).
pub fn read_at_most(path: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    if file.metadata().map_err(io)?.is_file() {
        file.read_to_end(&mut bytes).map_err(io)?;
        return Ok(Some(bytes));
    }
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(io)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// All of `path`, refused when it is a device: a file format is never read from one (and
/// `/dev/zero` never ends), while a pipe may carry one (`--init-params <(...)`).
pub fn read_unless_device(path: &Path) -> Result<Vec<u8>> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let file_type = std::fs::metadata(path).map_err(io)?.file_type();
    if let Some(kind) = kind_of(&file_type).filter(|_| is_device(&file_type)) {
        return Err(io(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{kind}, not a file"))));
    }
    std::fs::read(path).map_err(io)
}

/// All of `path`, refused unless it is a regular file (or a link to one): for files a program
/// wrote beside others (a checkpoint's, a vocabulary beside token shards), which a FIFO would
/// leave waiting for a writer and a device would never end.
pub fn read_regular_file(path: &Path) -> Result<Vec<u8>> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let file_type = std::fs::metadata(path).map_err(io)?.file_type();
    if let Some(kind) = kind_of(&file_type) {
        return Err(io(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{kind}, not a file"))));
    }
    std::fs::read(path).map_err(io)
}

fn is_device(file_type: &FileType) -> bool {
    use std::os::unix::fs::FileTypeExt;
    file_type.is_char_device() || file_type.is_block_device()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_devices_are_bounded_or_refused_and_files_read_whole() {
        let zero = Path::new("/dev/zero");
        assert_eq!(read_at_most(zero, 1000).unwrap(), None, "1001 bytes read, then given up");
        let err = read_unless_device(zero).unwrap_err().to_string();
        assert_eq!(err, "/dev/zero: a character device, not a file");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"12345").unwrap();
        assert_eq!(read_at_most(&file, 5).unwrap().as_deref(), Some(&b"12345"[..]));
        assert_eq!(read_at_most(&file, 4).unwrap().as_deref(), Some(&b"12345"[..]), "a file is read whole");
        assert_eq!(read_unless_device(&file).unwrap(), b"12345");
        assert_eq!(read_regular_file(&file).unwrap(), b"12345");
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let err = read_regular_file(&fifo).unwrap_err().to_string();
        assert!(err.ends_with("fifo: a FIFO (named pipe), not a file"), "{err}");
        assert!(read_regular_file(zero).unwrap_err().to_string().ends_with("a character device, not a file"));
    }
}
