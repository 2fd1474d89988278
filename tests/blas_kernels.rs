//! The command line runs OpenBLAS's kernels for this CPU: a library older than the CPU (Debian
//! 12's OpenBLAS on a Sapphire or Emerald Rapids Xeon) picks its generic SSE3 ones, and the
//! program starts itself again, once, with `OPENBLAS_CORETYPE` naming the set the CPU runs.

#![cfg(not(feature = "mkl"))]

mod common;

use std::process::Command;

use common::example;
use overlap_runtime::command_line::blas_core;

/// The kernel sets OpenBLAS reported loading (`OPENBLAS_VERBOSE=2`), in order.
fn cores_loaded(env: &[(&str, &str)]) -> Vec<String> {
    let text = mlp_output(env);
    assert!(!text.contains("note: OpenBLAS runs"), "the restart fixed what the note would say:\n{text}");
    text.lines().filter_map(|l| l.strip_prefix("Core: ")).map(str::to_string).collect()
}

/// One step of `mlp`, its kernel sets reported, with `env` added: what it printed.
fn mlp_output(env: &[(&str, &str)]) -> String {
    let out = Command::new(example("mlp"))
        .args(["--steps", "1", "--batch", "4", "--report", "off"])
        .env_remove(blas_core::CORETYPE_VARIABLE)
        .env("OPENBLAS_VERBOSE", "2")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

#[test]
fn the_command_line_runs_the_kernels_this_cpu_runs() {
    // This process loaded OpenBLAS as its environment said; where that names a kernel set
    // (some machines set it for every process), the comparison below runs in a copy of this
    // test started without it, which loads the library as the example first does.
    if std::env::var_os(blas_core::CORETYPE_VARIABLE).is_some() {
        let exe = std::env::current_exe().expect("this test's binary");
        let out = Command::new(exe)
            .args(["--exact", "the_command_line_runs_the_kernels_this_cpu_runs", "--nocapture"])
            .env_remove(blas_core::CORETYPE_VARIABLE)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"), "without {}:\n{text}", blas_core::CORETYPE_VARIABLE);
        return;
    }
    let cores = cores_loaded(&[]);
    assert!(!cores.is_empty() && cores.len() <= 2, "loaded once, or once more after one restart: {cores:?}");
    // This test process loaded the same library the same way the example did first.
    assert_eq!(cores[0].to_ascii_lowercase(), blas_core::chosen().to_ascii_lowercase());
    match blas_core::mismatch() {
        Some(fitting) => assert_eq!(cores, [blas_core::chosen(), fitting.to_string()], "restarted with {fitting}"),
        None => assert_eq!(cores.len(), 1, "nothing to restart for: {cores:?}"),
    }
}

#[test]
fn a_users_choice_of_kernels_stands() {
    let cores = cores_loaded(&[(blas_core::CORETYPE_VARIABLE, "Haswell")]);
    assert_eq!(cores, ["Haswell"]);
}

#[test]
fn a_choice_below_what_the_cpu_runs_is_named_with_its_cost() {
    let text = mlp_output(&[(blas_core::CORETYPE_VARIABLE, "Haswell")]);
    let note = text.lines().find(|l| l.starts_with("note: OPENBLAS_CORETYPE is set"));
    match blas_core::fitting() {
        // An AVX-512 CPU: Haswell's kernels are below what it runs, and the note says so.
        Some(fitting) if fitting != "Haswell" => {
            let note = note.unwrap_or_else(|| panic!("no note on a CPU that runs {fitting}:\n{text}"));
            assert!(note.contains("the Haswell kernels") && note.contains(&format!("set it to {fitting}")), "{note}");
        }
        // Haswell is the best this CPU runs (or it runs none of these): nothing to say.
        _ => assert!(note.is_none(), "{text}"),
    }
}

/// `--cuda-libraries` names the kernel set the program runs, the one `scripts/gpu-check.sh`
/// hands its GPU tests (their CPU references do not restart themselves): the CPU's best, or,
/// as always, a user's choice. (Without the `cuda` feature the listing is refused.)
#[cfg(feature = "cuda")]
#[test]
fn the_library_listing_names_the_kernels_the_program_runs() {
    // What the program picks by itself is known here only if this process loaded OpenBLAS
    // without a choice in its environment, as the program does.
    let own = std::env::var_os(blas_core::CORETYPE_VARIABLE)
        .is_none()
        .then(|| (None, blas_core::mismatch().map_or_else(blas_core::chosen, str::to_string)));
    for (env, expected) in own.into_iter().chain([(Some("Haswell"), "Haswell".to_string())]) {
        let mut cmd = Command::new(example("mlp"));
        cmd.arg("--cuda-libraries").env_remove(blas_core::CORETYPE_VARIABLE);
        if let Some(core) = env {
            cmd.env(blas_core::CORETYPE_VARIABLE, core);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let listed = text.lines().find_map(|l| l.strip_prefix("OpenBLAS kernels ")).unwrap_or_default();
        assert_eq!(listed.to_ascii_lowercase(), expected.to_ascii_lowercase(), "{text}");
    }
}
