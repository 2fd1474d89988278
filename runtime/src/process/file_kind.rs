//! What a path names when it is not a regular file, in words: for messages that say a FIFO or
//! a device was given where a file was meant. Imports nothing of the crate, so that any reader of
//! files (the IDX loader among them, which the crate's error type names) can use it.

use std::fs::FileType;

/// What a path that is not a regular file is, in words (`None` for a regular file, or a link to
/// one).
pub fn kind_of(file_type: &FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        Some("a folder")
    } else if file_type.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else {
        None
    }
}
