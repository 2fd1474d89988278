//! What can be wrong with an IDX file or a folder of them; every message names the file.

use std::path::{Path, PathBuf};

use super::split::Split;

/// What is wrong with the contents of one IDX file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdxProblem {
    /// The first two bytes are not zero: not an IDX file, or still gzip-compressed (a file of the
    /// other kind, images for labels, is `WrongDimensions`).
    #[error(
        "bad magic number 0x{found:08x}, expected 0x{expected:08x}{}",
        if *gzip { " (the file looks gzip-compressed: decompress it first (gunzip))" } else { "" }
    )]
    BadMagic {
        /// The first four bytes, big-endian.
        found: u32,
        /// [`IMAGES_MAGIC`](super::IMAGES_MAGIC) or [`LABELS_MAGIC`](super::LABELS_MAGIC).
        expected: u32,
        /// Whether the file starts as a gzip stream does, for the message to suggest `gunzip`.
        gzip: bool,
    },
    /// The data type byte is not `0x08`: the values are not unsigned bytes.
    #[error("unsupported data type byte 0x{found:02x}: only 0x08 (unsigned byte) is supported")]
    UnsupportedType {
        /// The third byte of the file.
        found: u8,
    },
    /// The header's dimension count is not that of the kind of file expected (3 for images, 1
    /// for labels).
    #[error("the header declares {found} dimension(s), expected {expected} (magic 0x{magic:08x})")]
    WrongDimensions {
        /// The fourth byte of the file.
        found: u8,
        /// 3 for an image file, 1 for a label file.
        expected: u8,
        /// The magic number expected, naming the kind of file.
        magic: u32,
    },
    /// A dimension size in the header is zero: the file would hold no sample.
    #[error("dimension {index} of the header is zero")]
    ZeroDimension {
        /// The dimension's position in the header, from 0 (0 is the sample count).
        index: usize,
    },
    /// The file ends inside its header.
    #[error("truncated header: expected {expected} bytes, found {found}")]
    TruncatedHeader {
        /// The header's length in bytes: 4, then 4 per dimension (4 when the file is shorter
        /// than the first 4).
        expected: usize,
        /// The file's length in bytes.
        found: usize,
    },
    /// The data after the header is shorter than the dimensions declare.
    #[error("truncated: expected {expected} bytes of data, found {found}")]
    Truncated {
        /// The product of the dimensions, in bytes (a `u128`: it can exceed any file).
        expected: u128,
        /// The bytes after the header.
        found: usize,
    },
    /// The data after the header is longer than the dimensions declare.
    #[error("{count} trailing byte(s) after the {expected} bytes of data the header declares")]
    TrailingBytes {
        /// The product of the dimensions, in bytes.
        expected: usize,
        /// The bytes beyond them.
        count: usize,
    },
    /// A label is not below the number of classes the caller asked for.
    #[error("label {value} at index {index} is out of range for {classes} classes")]
    LabelOutOfRange {
        /// The label's position in the file, from 0.
        index: usize,
        /// The label's value, meant as a class index.
        value: u8,
        /// The number of classes the labels were checked against.
        classes: usize,
    },
}

/// An IDX file that could not be loaded; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum IdxError {
    /// The file could not be opened or read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file, as given or as found in the folder.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file was read but its contents are not a valid IDX file of the kind expected.
    #[error("{path}: {problem}")]
    Format {
        /// The file, as given or as found in the folder.
        path: PathBuf,
        /// What is wrong with its contents.
        problem: IdxProblem,
    },
    /// The image file and the label file hold different numbers of samples.
    #[error("{images_path} holds {images} images but {labels_path} holds {labels} labels")]
    CountMismatch {
        /// The image file, as given or as found in the folder.
        images_path: PathBuf,
        /// The image count its header declares.
        images: usize,
        /// The label file, as given or as found in the folder.
        labels_path: PathBuf,
        /// The label count its header declares.
        labels: usize,
    },
    /// Neither the original nor the dotted name of a split's file is in the folder
    /// ([`IdxDataset::load_dir`](super::IdxDataset::load_dir)).
    #[error("no {split} {what} file: none of {} exists{}", list(tried), gunzip_hint(compressed.as_deref()))]
    NotFound {
        /// The half of the set being loaded.
        split: Split,
        /// Which of its files: `"images"` or `"labels"`.
        what: &'static str,
        /// Every path looked for, in the order tried.
        tried: Vec<PathBuf>,
        /// One of them with `.gz` added, where it exists: the file as MNIST's downloads arrive.
        compressed: Option<PathBuf>,
    },
    /// The path exists but is not a regular file: opening a FIFO would wait for a writer.
    #[error("{path}: {kind}, not a file")]
    NotAFile {
        /// The path given, or the name found in the folder.
        path: PathBuf,
        /// What it is instead, in words (`a folder`, `a FIFO (named pipe)`, `a loop of symbolic links`).
        kind: &'static str,
    },
}

fn list(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn gunzip_hint(compressed: Option<&Path>) -> String {
    compressed.map_or(String::new(), |gz| format!(" ({} is there, still compressed: gunzip it)", gz.display()))
}
