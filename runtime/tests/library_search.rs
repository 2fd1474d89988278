//! The library search on real files: NVRTC from its pip wheel, laid out as in a Python
//! environment that is not on the loader's path, is found, opened by its full path, and then
//! opened by cudarc under its usual name, and compiles the kernels. `make test` runs this with
//! `--include-ignored`, `OVERLAP_NVRTC_WHEEL` naming the folder that holds the wheel's `nvidia/`,
//! and without `LD_LIBRARY_PATH`.
#![cfg(feature = "cuda")]

use overlap_runtime::cuda::libraries::{load, locate, nvrtc_findable, SearchEnv};
use overlap_runtime::cuda::{compile, KERNEL_SOURCES};

#[test]
#[ignore = "needs the NVRTC wheel: make test installs it and runs this test"]
fn nvrtc_in_a_python_environment_off_the_loaders_path_is_loaded_and_compiles() {
    let wheel = std::env::var_os("OVERLAP_NVRTC_WHEEL")
        .expect("OVERLAP_NVRTC_WHEEL names the folder holding the wheel's nvidia/ (make test sets it)");
    assert!(!nvrtc_findable(), "NVRTC is already findable by name: run this test without LD_LIBRARY_PATH");
    let machine = tempfile::tempdir().unwrap();
    let venv = machine.path().join("venv");
    let site = venv.join("lib/python3.11/site-packages");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(venv.join("bin/python3"), b"").unwrap();
    std::os::unix::fs::symlink(std::path::Path::new(&wheel).join("nvidia"), site.join("nvidia")).unwrap();

    let located = locate(&SearchEnv { path: Some(venv.join("bin").into_os_string()), ..SearchEnv::default() });
    let nvrtc = located.get("NVRTC").expect("NVRTC is found in the environment's nvidia/*/lib");
    assert_eq!(nvrtc.origin, format!("Python environment {}", venv.display()));
    load(&located).unwrap();
    assert!(nvrtc_findable(), "cudarc opens the library loaded by path under its soname");
    let compiled = compile(&KERNEL_SOURCES[0], "sm_90").unwrap();
    assert!(compiled.cubin.starts_with(b"\x7fELF"));
    println!("NVRTC from {}: {} bytes of CUBIN", nvrtc.path.display(), compiled.cubin.len());
}
