//! Every kernel source compiles with NVRTC for Ampere (sm_80) and Hopper (sm_90) without an
//! error or a warning. Needs `libnvrtc` but no GPU: `make test` installs the
//! `nvidia-cuda-nvrtc-cu12` wheel into `.tools/` and runs these with `--include-ignored`; without
//! the library they are reported as ignored, not passed.
#![cfg(feature = "cuda")]

use overlap_runtime::cuda::{compile, nvrtc_available, KernelSource, KERNEL_SOURCES};

const NEEDS_NVRTC: &str = "libnvrtc cannot be loaded: set LD_LIBRARY_PATH to the wheel's nvidia/cuda_nvrtc/lib";

#[test]
#[ignore = "needs libnvrtc: make test installs it and runs this test"]
fn every_kernel_compiles_cleanly_for_sm80_and_sm90() {
    assert!(nvrtc_available(), "{NEEDS_NVRTC}");
    for arch in ["sm_80", "sm_90"] {
        for kernel in KERNEL_SOURCES {
            let compiled = compile(kernel, arch).unwrap_or_else(|e| panic!("{e}"));
            assert!(compiled.log.is_empty(), "{} for {arch} compiled with warnings:\n{}", kernel.file, compiled.log);
            for name in kernel.kernels {
                assert!(
                    compiled.ptx.contains(&format!(".entry {name}(")),
                    "{}: no kernel `{name}` in the PTX for {arch}",
                    kernel.file
                );
            }
            println!(
                "{} for {arch}: {} bytes of PTX, {} kernels",
                kernel.file,
                compiled.ptx.len(),
                kernel.kernels.len()
            );
        }
    }
}

#[test]
#[ignore = "needs libnvrtc: make test installs it and runs this test"]
fn a_broken_kernel_is_an_error_carrying_the_log() {
    assert!(nvrtc_available(), "{NEEDS_NVRTC}");
    let broken = KernelSource {
        file: "broken.cu",
        source: "extern \"C\" __global__ void f(float* x) { x[0] = undefined_name; }",
        kernels: &["f"],
    };
    let err = compile(&broken, "sm_90").unwrap_err();
    assert!(err.contains("broken.cu") && err.contains("undefined_name"), "{err}");
}

#[test]
#[ignore = "needs libnvrtc: make test installs it and runs this test"]
fn a_warning_is_kept_in_the_log() {
    assert!(nvrtc_available(), "{NEEDS_NVRTC}");
    let noisy = KernelSource {
        file: "noisy.cu",
        source: "extern \"C\" __global__ void f(float* x) { int unused = 3; x[0] = 1.0f; }",
        kernels: &["f"],
    };
    let compiled = compile(&noisy, "sm_90").unwrap();
    assert!(compiled.log.contains("unused"), "NVRTC's warning reaches the caller: {:?}", compiled.log);
}
