//! Loader for the IDX file format used by MNIST, Fashion-MNIST and their copies, so that examples
//! can train on real data instead of `SyntheticClassification`.
//!
//! An IDX file is two zero bytes, a data type byte (only `0x08`, unsigned byte, is supported), a
//! byte giving the number of dimensions, that many big-endian `u32` dimension sizes, then the data.
//! Image files have 3 dimensions (count, rows, cols), label files 1 (count).
//!
//! Files come from outside the program, so parsing never panics: every header is checked against
//! the actual byte length before anything is allocated, and every problem becomes an [`IdxError`]
//! that names the file and says what is wrong with it. Whether the image size matches the model's
//! input width is left to the caller.

use std::path::{Path, PathBuf};

mod error;
mod split;

pub use error::{IdxError, IdxProblem};
pub use split::Split;

use crate::process::file_kind::kind_of;
use crate::tensor::Matrix;

/// Magic number of an image file: unsigned bytes, 3 dimensions.
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of a label file: unsigned bytes, 1 dimension.
pub const LABELS_MAGIC: u32 = 0x0000_0801;
/// The only data type supported: unsigned byte.
const UNSIGNED_BYTE: u8 = 0x08;
/// First two bytes of a gzip stream; the MNIST files are distributed gzip-compressed.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Checks the header of an IDX file of unsigned bytes with `N` dimensions and returns the
/// dimensions and the data, whose length is exactly their product.
fn parse<const N: usize>(bytes: &[u8], magic: u32) -> Result<([usize; N], &[u8]), IdxProblem> {
    let Some((&head, rest)) = bytes.split_first_chunk::<4>() else {
        return Err(IdxProblem::TruncatedHeader { expected: 4, found: bytes.len() });
    };
    let found = u32::from_be_bytes(head);
    if head[..2] != [0, 0] {
        return Err(IdxProblem::BadMagic { found, expected: magic, gzip: head[..2] == GZIP_MAGIC });
    }
    if head[2] != UNSIGNED_BYTE {
        return Err(IdxProblem::UnsupportedType { found: head[2] });
    }
    // N is 1 or 3 here, so the cast cannot truncate.
    if usize::from(head[3]) != N {
        return Err(IdxProblem::WrongDimensions { found: head[3], expected: N as u8, magic });
    }
    let mut dims = [0usize; N];
    let mut rest = rest;
    for (index, dim) in dims.iter_mut().enumerate() {
        let Some((&size, tail)) = rest.split_first_chunk::<4>() else {
            return Err(IdxProblem::TruncatedHeader { expected: 4 + 4 * N, found: bytes.len() });
        };
        let size = u32::from_be_bytes(size);
        if size == 0 {
            return Err(IdxProblem::ZeroDimension { index });
        }
        // Every u32 fits a usize on the platforms we build for; treat anything else as too large.
        *dim = usize::try_from(size).unwrap_or(usize::MAX);
        rest = tail;
    }
    // At most three u32 factors: the product fits a u128, and saturating keeps it panic-free anyway.
    let expected = dims.iter().fold(1u128, |acc, &d| acc.saturating_mul(d as u128));
    if expected > rest.len() as u128 {
        return Err(IdxProblem::Truncated { expected, found: rest.len() });
    }
    // expected <= rest.len(), so it fits a usize and the split cannot fail.
    let expected = expected as usize;
    match rest.split_at_checked(expected) {
        Some((data, [])) => Ok((dims, data)),
        Some((_, trailing)) => Err(IdxProblem::TrailingBytes { expected, count: trailing.len() }),
        None => Err(IdxProblem::Truncated { expected: expected as u128, found: rest.len() }),
    }
}

/// Parses an image file: returns (count, rows, cols, pixels), `pixels.len() == count * rows * cols`.
pub fn parse_images(bytes: &[u8]) -> Result<(usize, usize, usize, &[u8]), IdxProblem> {
    let ([count, rows, cols], data) = parse::<3>(bytes, IMAGES_MAGIC)?;
    Ok((count, rows, cols, data))
}

/// Parses a label file: returns one byte per label.
pub fn parse_labels(bytes: &[u8]) -> Result<&[u8], IdxProblem> {
    let ([_count], data) = parse::<1>(bytes, LABELS_MAGIC)?;
    Ok(data)
}

/// Attaches `path` to a problem found in that file.
fn problem_in(path: &Path) -> impl Fn(IdxProblem) -> IdxError + '_ {
    move |problem| IdxError::Format { path: path.to_path_buf(), problem }
}

/// Reads the IDX file at `path` with `N` dimensions, its header first: a size that cannot match
/// what the header declares is refused from the file's length, before a byte of its data is read
/// (a 4 GiB file is not read to find that it is 4 GiB).
fn read<const N: usize>(path: &Path, magic: u32) -> Result<Vec<u8>, IdxError> {
    use std::io::Read;
    let io = |source| IdxError::Io { path: path.to_path_buf(), source };
    // Before opening: opening a FIFO would wait for a writer.
    if let Some(kind) = kind_of(&std::fs::metadata(path).map_err(io)?.file_type()) {
        return Err(IdxError::NotAFile { path: path.to_path_buf(), kind });
    }
    let mut file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let header_len = 4 + 4 * N;
    let mut header = vec![0u8; header_len.min(usize::try_from(len).unwrap_or(usize::MAX))];
    file.read_exact(&mut header).map_err(io)?;
    match parse::<N>(&header, magic) {
        // A whole header: what follows must be exactly the data it declares.
        Err(IdxProblem::Truncated { expected, .. }) => {
            let found = len.saturating_sub(header_len as u64);
            if u128::from(found) < expected {
                return Err(problem_in(path)(IdxProblem::Truncated { expected, found: found as usize }));
            }
            if u128::from(found) > expected {
                let (expected, count) = (expected as usize, (u128::from(found) - expected) as usize);
                return Err(problem_in(path)(IdxProblem::TrailingBytes { expected, count }));
            }
        }
        Err(problem) => return Err(problem_in(path)(problem)),
        Ok(_) => {} // Nothing declared beyond the header (never: dimensions are not zero).
    }
    let mut bytes = header;
    file.read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

/// The first of `names` that exists in `dir`, or an error listing every path tried; one that
/// is there but is no file (a FIFO, a device, a folder, a loop of links) is named as what it is.
fn find(dir: &Path, names: [String; 2], split: Split, what: &'static str) -> Result<PathBuf, IdxError> {
    let tried: Vec<PathBuf> = names.iter().map(|name| dir.join(name)).collect();
    if let Some(path) = tried.iter().find(|path| path.is_file()) {
        return Ok(path.clone());
    }
    for path in &tried {
        let kind = match std::fs::metadata(path) {
            Ok(meta) => kind_of(&meta.file_type()),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Some("a loop of symbolic links"),
            Err(_) => None,
        };
        if let Some(kind) = kind {
            return Err(IdxError::NotAFile { path: path.clone(), kind });
        }
    }
    let compressed = tried
        .iter()
        .map(|path| {
            let mut gz = path.as_os_str().to_owned();
            gz.push(".gz");
            PathBuf::from(gz)
        })
        .find(|gz| gz.is_file());
    Err(IdxError::NotFound { split, what, tried, compressed })
}

/// An in-memory image classification set loaded from a pair of IDX files.
///
/// Never empty: [`IdxDataset::load`] rejects zero-sized dimensions.
#[derive(Debug, Clone, PartialEq)]
pub struct IdxDataset {
    features: usize,
    /// Each image's rows and columns, as its file gives them.
    image_shape: (usize, usize),
    classes: usize,
    /// `len() x features`, row-major, each pixel divided by 255.
    images: Vec<f32>,
    labels: Vec<u8>,
    /// The image and label files it was read from (`Dataset::files`).
    files: Vec<PathBuf>,
}

impl IdxDataset {
    /// Loads an image file and a label file; every label must be below `classes`.
    pub fn load(images: &Path, labels: &Path, classes: usize) -> Result<IdxDataset, IdxError> {
        let image_bytes = read::<3>(images, IMAGES_MAGIC)?;
        let label_bytes = read::<1>(labels, LABELS_MAGIC)?;
        let (count, rows, cols, pixels) = parse_images(&image_bytes).map_err(problem_in(images))?;
        let label_data = parse_labels(&label_bytes).map_err(problem_in(labels))?;
        if count != label_data.len() {
            return Err(IdxError::CountMismatch {
                images_path: images.to_path_buf(),
                images: count,
                labels_path: labels.to_path_buf(),
                labels: label_data.len(),
            });
        }
        if let Some((index, &value)) = label_data.iter().enumerate().find(|(_, &l)| usize::from(l) >= classes) {
            return Err(problem_in(labels)(IdxProblem::LabelOutOfRange { index, value, classes }));
        }
        // parse_images checked count * rows * cols == pixels.len(), so this cannot overflow.
        let features = rows * cols;
        let files = vec![images.to_path_buf(), labels.to_path_buf()];
        let images = pixels.iter().map(|&p| f32::from(p) / 255.0).collect();
        let image_shape = (rows, cols);
        Ok(IdxDataset { features, image_shape, classes, images, labels: label_data.to_vec(), files })
    }

    /// Loads the `split` half of an MNIST-style directory, accepting both the original file names
    /// (`train-images-idx3-ubyte`) and the dotted ones of Fashion-MNIST/Kaggle copies
    /// (`train-images.idx3-ubyte`).
    pub fn load_dir(dir: &Path, split: Split, classes: usize) -> Result<IdxDataset, IdxError> {
        let [images, labels] = split.names();
        let images = find(dir, images, split, "images")?;
        let labels = find(dir, labels, split, "labels")?;
        IdxDataset::load(&images, &labels, classes)
    }

    /// The files of `split` that are in `dir`, under either naming, whether or not they load.
    pub fn split_files(dir: &Path, split: Split) -> Vec<PathBuf> {
        split.names().into_iter().flatten().map(|name| dir.join(name)).filter(|path| path.exists()).collect()
    }

    /// The image and label files it was read from.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Always false for a loaded set; present for API symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Pixels per image (rows x cols).
    pub fn features(&self) -> usize {
        self.features
    }

    /// Each image's rows and columns: two sets of as many pixels may still be images of two shapes.
    pub fn image_shape(&self) -> (usize, usize) {
        self.image_shape
    }

    /// Number of classes the labels were checked against.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// A hash of the images, labels and shape, for ranks to compare the sets they loaded.
    pub(crate) fn content_hash(&self) -> u64 {
        let mut hash = crate::content_hash::ContentHash::new();
        hash.u64(self.features as u64);
        hash.u64(self.classes as u64);
        hash.f32s(&self.images);
        hash.u32s(self.labels.iter().map(|&l| u32::from(l)));
        hash.finish()
    }

    /// Fills `inputs` (resized to `len x features`) and `labels` with samples `first..first+len`,
    /// wrapping around modulo `self.len()` so that any step index maps onto the set.
    pub fn fill_into(&self, first: u64, len: usize, inputs: &mut Matrix, labels: &mut Vec<usize>) {
        inputs.resize(len, self.features);
        labels.clear();
        let n = self.len();
        if n == 0 {
            return; // unreachable for a loaded set; keeps `%` below panic-free
        }
        let f = self.features;
        // The remainder is below n, so the cast back to usize is lossless.
        let mut index = (first % n as u64) as usize;
        for r in 0..len {
            // In range: `images.len() == n * features` and `index < n` (invariants of `load`).
            inputs.row_mut(r).copy_from_slice(&self.images[index * f..(index + 1) * f]);
            labels.push(usize::from(self.labels[index]));
            index = if index + 1 == n { 0 } else { index + 1 };
        }
    }
}

#[cfg(test)]
mod tests;
