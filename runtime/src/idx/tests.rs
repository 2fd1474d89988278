use std::path::PathBuf;

use proptest::prelude::*;

use super::*;

/// IDX bytes: magic `00 00 <kind> <dims.len()>`, big-endian dims, then `data` as given.
fn idx_bytes(kind: u8, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0, 0, kind, dims.len() as u8];
    for d in dims {
        bytes.extend_from_slice(&d.to_be_bytes());
    }
    bytes.extend_from_slice(data);
    bytes
}

/// A valid image file of `count` images of `rows x cols`; pixel `i` of the file is `i mod 256`.
fn image_file(count: u32, rows: u32, cols: u32) -> Vec<u8> {
    let data: Vec<u8> = (0..count * rows * cols).map(|i| (i % 256) as u8).collect();
    idx_bytes(UNSIGNED_BYTE, &[count, rows, cols], &data)
}

fn label_file(labels: &[u8]) -> Vec<u8> {
    idx_bytes(UNSIGNED_BYTE, &[labels.len() as u32], labels)
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(tempfile::TempDir);

impl TempDir {
    fn new(name: &str) -> Self {
        TempDir(tempfile::Builder::new().prefix(&format!("overlap-idx-{name}-")).tempdir().unwrap())
    }

    fn path(&self) -> &std::path::Path {
        self.0.path()
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

/// Loads `images`/`labels` bytes written as `images.idx`/`labels.idx`; returns the error message.
fn load_err(images: &[u8], labels: &[u8], classes: usize) -> (IdxError, String) {
    let dir = TempDir::new("err");
    let (i, l) = (dir.write("images.idx", images), dir.write("labels.idx", labels));
    let err = IdxDataset::load(&i, &l, classes).unwrap_err();
    let message = err.to_string();
    (err, message)
}

fn problem(err: &IdxError) -> &IdxProblem {
    match err {
        IdxError::Format { problem, .. } => problem,
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn round_trip_through_files() {
    let dir = TempDir::new("round-trip");
    dir.write("train-images-idx3-ubyte", &image_file(3, 2, 2));
    dir.write("train-labels-idx1-ubyte", &label_file(&[2, 0, 1]));
    let data = IdxDataset::load_dir(dir.path(), Split::Train, 3).unwrap();
    assert_eq!((data.len(), data.is_empty(), data.features(), data.classes()), (3, false, 4, 3));
    let (mut inputs, mut labels) = (Matrix::default(), vec![]);
    data.fill_into(0, 3, &mut inputs, &mut labels);
    assert_eq!((inputs.rows(), inputs.cols()), (3, 4));
    let expected: Vec<f32> = (0..12).map(|p| p as f32 / 255.0).collect();
    assert_eq!(inputs.as_slice(), expected.as_slice());
    assert_eq!(labels, [2, 0, 1]);
}

#[test]
fn load_dir_accepts_dotted_names_and_lists_paths_tried() {
    let dir = TempDir::new("dotted");
    let err = IdxDataset::load_dir(dir.path(), Split::Test, 10).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, IdxError::NotFound { split: Split::Test, .. }), "{message}");
    assert!(message.contains("t10k-images-idx3-ubyte") && message.contains("t10k-images.idx3-ubyte"), "{message}");
    assert!(!message.contains("gunzip"), "{message}");
    // The file as MNIST's downloads arrive: said to be there, compressed.
    dir.write("t10k-images-idx3-ubyte.gz", &[0x1f, 0x8b, 8, 0]);
    let message = IdxDataset::load_dir(dir.path(), Split::Test, 10).unwrap_err().to_string();
    assert!(message.contains("t10k-images-idx3-ubyte.gz is there, still compressed: gunzip it"), "{message}");
    dir.write("t10k-images.idx3-ubyte", &image_file(2, 1, 3));
    let message = IdxDataset::load_dir(dir.path(), Split::Test, 10).unwrap_err().to_string();
    assert!(message.contains("t10k-labels-idx1-ubyte") && message.contains("t10k-labels.idx1-ubyte"), "{message}");
    dir.write("t10k-labels.idx1-ubyte", &label_file(&[9, 4]));
    let data = IdxDataset::load_dir(dir.path(), Split::Test, 10).unwrap();
    assert_eq!((data.len(), data.features()), (2, 3));
}

#[test]
fn fill_wraps_around() {
    let dir = TempDir::new("wrap");
    let (i, l) = (dir.write("i", &image_file(3, 1, 2)), dir.write("l", &label_file(&[0, 1, 2])));
    let data = IdxDataset::load(&i, &l, 3).unwrap();
    let (mut inputs, mut labels) = (Matrix::default(), vec![]);
    data.fill_into(2, 5, &mut inputs, &mut labels);
    assert_eq!(labels, [2, 0, 1, 2, 0]);
    assert_eq!(inputs.row(0), [4.0 / 255.0, 5.0 / 255.0]);
    assert_eq!(inputs.row(1), [0.0, 1.0 / 255.0]);
    assert_eq!(inputs.row(4), inputs.row(1));
    // Same samples as the unwrapped indices; huge step indices do not overflow.
    let (mut other, mut other_labels) = (Matrix::default(), vec![]);
    data.fill_into(2 + 3 * 1000, 5, &mut other, &mut other_labels);
    assert_eq!((&inputs, &labels), (&other, &other_labels));
    data.fill_into(u64::MAX, 2, &mut other, &mut other_labels); // u64::MAX % 3 == 0
    assert_eq!(other_labels, [0, 1]);
}

#[test]
fn gzip_compressed_file_gets_a_hint() {
    let (err, message) = load_err(&[0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0], &label_file(&[0]), 1);
    assert!(matches!(problem(&err), IdxProblem::BadMagic { gzip: true, expected: IMAGES_MAGIC, .. }));
    assert!(message.contains("images.idx") && message.contains("gunzip"), "{message}");
    assert!(message.contains("0x1f8b0800") && message.contains("0x00000803"), "{message}");
}

#[test]
fn bad_magic_says_found_and_expected() {
    let (err, message) = load_err(&image_file(1, 1, 1), b"not an idx file", 1);
    assert!(matches!(problem(&err), IdxProblem::BadMagic { gzip: false, expected: LABELS_MAGIC, .. }));
    assert!(message.contains("labels.idx") && message.contains("0x00000801"), "{message}");
    assert!(!message.contains("gunzip"), "{message}");
}

#[test]
fn swapped_files_have_wrong_dimensions() {
    let (err, message) = load_err(&label_file(&[0]), &image_file(1, 1, 1), 1);
    assert_eq!(problem(&err), &IdxProblem::WrongDimensions { found: 1, expected: 3, magic: IMAGES_MAGIC });
    assert!(message.contains("images.idx") && message.contains("0x00000803"), "{message}");
}

#[test]
fn unsupported_type_byte() {
    let floats = idx_bytes(0x0d, &[1, 1, 1], &[0; 4]);
    let (err, message) = load_err(&floats, &label_file(&[0]), 1);
    assert_eq!(problem(&err), &IdxProblem::UnsupportedType { found: 0x0d });
    assert!(message.contains("images.idx") && message.contains("0x0d"), "{message}");
}

#[test]
fn zero_sized_dimension() {
    let (err, message) = load_err(&idx_bytes(UNSIGNED_BYTE, &[4, 0, 2], &[]), &label_file(&[0]), 1);
    assert_eq!(problem(&err), &IdxProblem::ZeroDimension { index: 1 });
    assert!(message.contains("images.idx"), "{message}");
    let (err, message) = load_err(&image_file(1, 1, 1), &label_file(&[]), 1);
    assert_eq!(problem(&err), &IdxProblem::ZeroDimension { index: 0 });
    assert!(message.contains("labels.idx"), "{message}");
}

#[test]
fn truncated_header_and_data() {
    let (err, message) = load_err(&[0, 0], &label_file(&[0]), 1);
    assert_eq!(problem(&err), &IdxProblem::TruncatedHeader { expected: 4, found: 2 });
    assert!(message.contains("images.idx"), "{message}");
    // Declares 3 dims in the magic but holds only two.
    let mut short = idx_bytes(UNSIGNED_BYTE, &[1, 1], &[]);
    short[3] = 3;
    let (err, _) = load_err(&short, &label_file(&[0]), 1);
    assert_eq!(problem(&err), &IdxProblem::TruncatedHeader { expected: 16, found: 12 });
    let mut file = image_file(2, 3, 3);
    file.truncate(file.len() - 5);
    let (err, message) = load_err(&file, &label_file(&[0, 0]), 1);
    assert_eq!(problem(&err), &IdxProblem::Truncated { expected: 18, found: 13 });
    assert!(message.contains("images.idx") && message.contains("expected 18 bytes of data, found 13"), "{message}");
}

#[test]
fn huge_dimensions_are_reported_not_allocated() {
    let huge = idx_bytes(UNSIGNED_BYTE, &[u32::MAX; 3], &[1, 2, 3]);
    let (err, _) = load_err(&huge, &label_file(&[0]), 1);
    let expected = (u32::MAX as u128).pow(3);
    assert_eq!(problem(&err), &IdxProblem::Truncated { expected, found: 3 });
}

#[test]
fn trailing_bytes() {
    let mut labels = label_file(&[0, 1]);
    labels.push(7);
    let (err, message) = load_err(&image_file(2, 1, 1), &labels, 2);
    assert_eq!(problem(&err), &IdxProblem::TrailingBytes { expected: 2, count: 1 });
    assert!(message.contains("labels.idx") && message.contains("trailing"), "{message}");
}

#[test]
fn label_out_of_range() {
    let (err, message) = load_err(&image_file(3, 1, 1), &label_file(&[0, 1, 10]), 10);
    assert_eq!(problem(&err), &IdxProblem::LabelOutOfRange { index: 2, value: 10, classes: 10 });
    assert!(message.contains("labels.idx") && message.contains("10 classes"), "{message}");
}

#[test]
fn count_mismatch_names_both_files() {
    let (err, message) = load_err(&image_file(3, 1, 1), &label_file(&[0, 1]), 2);
    assert!(matches!(err, IdxError::CountMismatch { images: 3, labels: 2, .. }));
    assert!(message.contains("images.idx") && message.contains("labels.idx"), "{message}");
}

#[test]
fn missing_file_is_an_io_error() {
    let dir = TempDir::new("missing");
    let (i, l) = (dir.path().join("nope-images"), dir.write("labels.idx", &label_file(&[0])));
    let err = IdxDataset::load(&i, &l, 1).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, IdxError::Io { .. }));
    assert!(message.contains("nope-images") && message.contains("cannot read"), "{message}");
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Extend(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Truncate),
        prop::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Extend),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        match m {
            Mutation::Flip(i, x) if !bytes.is_empty() => {
                let i = i % bytes.len();
                bytes[i] ^= x;
            }
            Mutation::Flip(..) => {}
            Mutation::Truncate(n) => bytes.truncate(n % (bytes.len() + 1)),
            Mutation::Extend(more) => bytes.extend_from_slice(more),
        }
    }
    bytes
}

/// Parsing must either fail or return data whose length matches the header.
fn check_parsers(bytes: &[u8]) {
    if let Ok((count, rows, cols, data)) = parse_images(bytes) {
        assert_eq!(data.len(), count * rows * cols);
    }
    let _ = parse_labels(bytes);
}

proptest! {
    #[test]
    fn parsers_never_panic_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        check_parsers(&bytes);
    }

    #[test]
    fn parsers_never_panic_on_mutated_valid_files(
        count in 1..5u32, rows in 1..6u32, cols in 1..6u32,
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let images = image_file(count, rows, cols);
        prop_assert!(parse_images(&images).is_ok());
        check_parsers(&mutate(images, &mutations));
        let labels = label_file(&vec![1; count as usize]);
        prop_assert!(parse_labels(&labels).is_ok());
        check_parsers(&mutate(labels, &mutations));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn load_never_panics_on_random_files(
        images in prop::collection::vec(any::<u8>(), 0..256),
        labels in prop::collection::vec(any::<u8>(), 0..64),
        mutations in prop::collection::vec(mutation(), 0..3),
        classes in 0..12usize,
    ) {
        let dir = TempDir::new("prop");
        let load = |images: &[u8], labels: &[u8]| {
            let (i, l) = (dir.write("images", images), dir.write("labels", labels));
            IdxDataset::load(&i, &l, classes).map(|d| d.len())
        };
        let _ = load(&images, &labels);
        // Near-valid files reach the deeper checks (counts, label range).
        let valid_images = mutate(image_file(2, 2, 2), &mutations);
        let _ = load(&valid_images, &label_file(&labels));
        if let Ok(n) = load(&image_file(labels.len().max(1) as u32, 1, 1), &label_file(&labels)) {
            prop_assert_eq!(n, labels.len());
        }
    }
}

#[test]
fn a_file_whose_length_cannot_match_its_header_is_refused_before_its_data_is_read() {
    // 1 TiB of labels declared as 3, on a sparse file: refused from the length alone (reading
    // that many zeros would take minutes, and fill memory long before).
    let dir = TempDir::new("sparse");
    let labels = dir.write("labels.idx", &label_file(&[1, 2, 3]));
    let file = std::fs::OpenOptions::new().write(true).open(&labels).unwrap();
    file.set_len(1 << 40).unwrap();
    let images = dir.write("images.idx", &image_file(3, 2, 2));
    let started = std::time::Instant::now();
    let err = IdxDataset::load(&images, &labels, 10).unwrap_err();
    assert!(matches!(problem(&err), IdxProblem::TrailingBytes { expected: 3, .. }), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "not read to its end");
    // Shorter than declared, too.
    let short = dir.write("short.idx", &label_file(&[1, 2, 3])[..10]);
    let err = IdxDataset::load(&images, &short, 10).unwrap_err();
    assert!(matches!(problem(&err), IdxProblem::Truncated { expected: 3, found: 2 }), "{err}");
}

#[test]
fn what_is_there_instead_of_a_file_is_named() {
    let _children = crate::test_children::one_at_a_time();
    let dir = TempDir::new("not-files");
    let fifo = dir.path().join("train-images-idx3-ubyte");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
    assert!(made, "mkfifo is available");
    dir.write("train-labels-idx1-ubyte", &label_file(&[1]));
    let message = IdxDataset::load_dir(dir.path(), Split::Train, 10).unwrap_err().to_string();
    assert!(message.contains("a FIFO (named pipe), not a file"), "{message}");
    // Loaded by path, a FIFO is refused before it is opened (which would wait for a writer).
    let message = IdxDataset::load(&fifo, &dir.path().join("train-labels-idx1-ubyte"), 10).unwrap_err().to_string();
    assert!(message.contains("a FIFO (named pipe), not a file"), "{message}");
    let looped = TempDir::new("loop");
    std::os::unix::fs::symlink("train-images-idx3-ubyte", looped.path().join("train-images-idx3-ubyte")).unwrap();
    let message = IdxDataset::load_dir(looped.path(), Split::Train, 10).unwrap_err().to_string();
    assert!(message.contains("a loop of symbolic links, not a file"), "{message}");
    let devices = TempDir::new("device");
    std::os::unix::fs::symlink("/dev/zero", devices.path().join("train-images-idx3-ubyte")).unwrap();
    let message = IdxDataset::load_dir(devices.path(), Split::Train, 10).unwrap_err().to_string();
    assert!(message.contains("a character device, not a file"), "{message}");
}
