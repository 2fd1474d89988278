//! `--data DIR`: training on MNIST-format files, and clear errors for files that are not.

mod common;

use std::path::Path;

use common::{example, mpirun_ok, scratch};

/// An IDX pair of `n` 28x28 images (a bright square whose corner encodes the label) and labels.
fn write_mnist_like(dir: &Path, n: u32) {
    let mut images = vec![0, 0, 8, 3];
    for d in [n, 28, 28] {
        images.extend_from_slice(&d.to_be_bytes());
    }
    let mut labels = vec![0, 0, 8, 1];
    labels.extend_from_slice(&n.to_be_bytes());
    for i in 0..n {
        let label = (i % 10) as u8;
        for r in 0..28 {
            for c in 0..28 {
                let on = r / 7 == usize::from(label / 4) && c / 7 == usize::from(label % 4);
                images.push(if on { 255 } else { 0 });
            }
        }
        labels.push(label);
    }
    std::fs::write(dir.join("train-images-idx3-ubyte"), images).unwrap();
    std::fs::write(dir.join("train-labels-idx1-ubyte"), labels).unwrap();
}

#[test]
fn trains_on_idx_files_across_ranks() {
    let root = scratch("idx");
    let dir = root.path();
    write_mnist_like(dir, 200);
    let exe = example("mlp");
    let out = mpirun_ok(&[
        "-n",
        "2",
        exe.to_str().unwrap(),
        "--data",
        dir.to_str().unwrap(),
        "--steps",
        "30",
        "--batch",
        "16",
        "--log-every",
        "30",
        "--report",
        "off",
    ]);
    let done = out.lines().find(|l| l.starts_with("done:")).expect("a summary line");
    let losses: Vec<f64> = done
        .split("loss ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .map(|s| s.split(" -> ").filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_default();
    assert_eq!(losses.len(), 2, "{done}");
    assert!(losses[1] < losses[0] * 0.5, "the loss falls on a learnable set: {done}");
}

#[test]
fn bad_idx_files_are_named_with_their_problem() {
    let root = scratch("idx-bad");
    let dir = root.path();
    write_mnist_like(dir, 20);
    let labels = dir.join("train-labels-idx1-ubyte");
    let mut bytes = std::fs::read(&labels).unwrap();
    bytes[8 + 3] = 42; // label 42 in a 10-class model
    std::fs::write(&labels, &bytes).unwrap();
    let out = std::process::Command::new(example("mlp"))
        .args(["--data", dir.to_str().unwrap(), "--steps", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("train-labels-idx1-ubyte") && stderr.contains("42"), "{stderr}");

    // Images of the wrong size for the model.
    write_mnist_like(dir, 20);
    let out = std::process::Command::new(example("tower"))
        .args(["--data", dir.to_str().unwrap(), "--steps", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("images have 784 pixels, the model's first layer takes 64 inputs"), "{stderr}");

    // Held-out images of as many pixels in another shape (14x56 against 28x28).
    write_mnist_like(dir, 20);
    let mut test_images = std::fs::read(dir.join("train-images-idx3-ubyte")).unwrap();
    test_images[8..16].copy_from_slice(&[0, 0, 0, 14, 0, 0, 0, 56]);
    std::fs::write(dir.join("t10k-images-idx3-ubyte"), test_images).unwrap();
    std::fs::copy(dir.join("train-labels-idx1-ubyte"), dir.join("t10k-labels-idx1-ubyte")).unwrap();
    let out = std::process::Command::new(example("mlp"))
        .args(["--data", dir.to_str().unwrap(), "--steps", "1", "--eval-every", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("t10k-images-idx3-ubyte: images of 14x56 pixels, the training images (")
            && stderr.contains("train-images-idx3-ubyte) 28x28"),
        "{stderr}"
    );
}
