//! A user's crate outside the examples (`tests/external`: its own model of `Linear`,
//! `LayerNorm`, `Gelu` and `Tanh` layers, its own loss and dataset, the `Trainer`) trains under
//! `mpirun -n 2` with checkpoints and the report, and ends with the parameters of a single
//! process, to the tolerance of the other parity tests.

mod common;

use common::{load_sorted_params, max_relative_difference, mpirun_ok, scratch};

/// `target/<profile>/external-user`, which `cargo test --workspace --all-targets` builds.
fn external_user() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let path = exe.parent().and_then(std::path::Path::parent).expect("target/<profile>").join("external-user");
    assert!(
        path.exists(),
        "{} is missing: build it first (`cargo build --workspace --bins`; `make test` does)",
        path.display()
    );
    path
}

#[test]
fn a_users_own_model_loss_and_data_train_on_two_ranks_as_on_one() {
    let root = scratch("external");
    let (one, two) = (root.path().join("one"), root.path().join("two"));
    let exe = external_user();
    let single = std::process::Command::new(&exe).arg(&one).output().expect("external-user starts");
    assert!(single.status.success(), "{}", String::from_utf8_lossy(&single.stderr));
    let stdout = mpirun_ok(&["-n", "2", exe.to_str().unwrap(), two.to_str().unwrap()]);
    assert!(stdout.contains("overlap report: Regressor, 2 rank(s)"), "the report is printed:\n{stdout}");
    for dir in [&one, &two] {
        let steps: Vec<_> = std::fs::read_dir(dir.join("ck")).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(steps.iter().any(|s| s.to_string_lossy().starts_with("step-")), "checkpoints in {dir:?}: {steps:?}");
    }
    let a = load_sorted_params(&one.join("params.safetensors"));
    let b = load_sorted_params(&two.join("params.safetensors"));
    assert_eq!(
        a.len(),
        8,
        "the weights and biases of fc1, norm, fc2 and head: {:?}",
        a.iter().map(|p| &p.0).collect::<Vec<_>>()
    );
    let d = max_relative_difference(&b, &a);
    println!("2 ranks vs 1: largest relative difference {d:e}");
    assert!(d < 1e-5, "2 ranks differ from 1 by {d:e}");
}
