//! Every kernel source compiles with NVRTC for Ampere (sm_80) and Hopper (sm_90) to machine
//! code (CUBIN) without an error or a warning, and `ptxas` assembles its PTX for Hopper without
//! spilling registers. Needs `libnvrtc` and `ptxas` but no GPU: `make test` installs the
//! `nvidia-cuda-nvrtc-cu12` and `nvidia-cuda-nvcc-cu12` wheels into `.tools/` and runs these with
//! `--include-ignored`; without them they are reported as ignored, not passed. On a GPU machine
//! without the wheel, `ptxas` is taken from `PATH` or the CUDA toolkit, or that test says it is
//! skipped.
#![cfg(feature = "cuda")]

use overlap_runtime::cuda::{compile, nvrtc_available, KernelSource, KERNEL_SOURCES};

/// `e_machine` of NVIDIA GPU code in an ELF header.
const EM_CUDA: u16 = 190;

const NEEDS_NVRTC: &str = "libnvrtc cannot be loaded: set LD_LIBRARY_PATH to the wheel's nvidia/cuda_nvrtc/lib";

#[test]
#[ignore = "needs libnvrtc: make test installs it and runs this test"]
fn every_kernel_compiles_cleanly_to_cubin_for_sm80_and_sm90() {
    assert!(nvrtc_available(), "{NEEDS_NVRTC}");
    for arch in ["sm_80", "sm_90"] {
        for kernel in KERNEL_SOURCES {
            let compiled = compile(kernel, arch).unwrap_or_else(|e| panic!("{e}"));
            assert!(compiled.log.is_empty(), "{} for {arch} compiled with warnings:\n{}", kernel.file, compiled.log);
            let cubin = &compiled.cubin;
            assert_eq!(
                cubin.get(..4),
                Some(&b"\x7fELF"[..]),
                "{} for {arch}: the CUBIN is not an ELF image",
                kernel.file
            );
            let machine = cubin.get(18..20).map(|b| u16::from_le_bytes([b[0], b[1]]));
            assert_eq!(machine, Some(EM_CUDA), "{} for {arch}: the ELF image is not CUDA machine code", kernel.file);
            for name in kernel.kernels {
                assert!(
                    compiled.ptx.contains(&format!(".entry {name}(")),
                    "{}: no kernel `{name}` in the PTX for {arch}",
                    kernel.file
                );
                let symbol = format!("\0{name}\0");
                assert!(
                    cubin.windows(symbol.len()).any(|w| w == symbol.as_bytes()),
                    "{}: no kernel `{name}` in the CUBIN for {arch}",
                    kernel.file
                );
            }
            println!(
                "{} for {arch}: {} bytes of CUBIN, {} bytes of PTX, {} kernels",
                kernel.file,
                cubin.len(),
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

/// `ptxas`: the one `OVERLAP_PTXAS` names (`make test` installs the `nvidia-cuda-nvcc-cu12`
/// wheel's), else one on `PATH`, else a CUDA toolkit's.
fn ptxas() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("OVERLAP_PTXAS") {
        return Some(path.into());
    }
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    let toolkit = ["/usr/local/cuda/bin"].map(std::path::PathBuf::from);
    on_path.chain(toolkit).map(|dir| dir.join("ptxas")).find(|exe| exe.is_file())
}

/// Registers, spill stores and spill loads per kernel, from `ptxas -v`'s report.
fn resource_usage(report: &str) -> Vec<(String, u32, u32, u32)> {
    let mut usage = Vec::new();
    let mut current: Option<(String, u32, u32)> = None;
    let number_before = |line: &str, word: &str| -> Option<u32> {
        let at = line.find(word)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    for line in report.lines() {
        if let Some(at) = line.find("Compiling entry function '") {
            let name = line[at + 26..].split('\'').next().unwrap_or_default().to_string();
            current = Some((name, 0, 0));
        } else if line.contains("spill stores") {
            if let Some((_, stores, loads)) = current.as_mut() {
                *stores = number_before(line, "bytes spill stores").unwrap_or(0);
                *loads = number_before(line, "bytes spill loads").unwrap_or(0);
            }
        } else if let Some(registers) = number_before(line, "registers") {
            if let Some((name, stores, loads)) = current.take() {
                usage.push((name, registers, stores, loads));
            }
        }
    }
    usage
}

#[test]
#[ignore = "needs libnvrtc and ptxas: make test installs both and runs this test"]
fn every_kernel_assembles_for_sm90_without_spills() {
    assert!(nvrtc_available(), "{NEEDS_NVRTC}");
    let Some(ptxas) = ptxas() else {
        println!("skipped: no ptxas (set OVERLAP_PTXAS, or install the CUDA toolkit or the nvidia-cuda-nvcc wheel)");
        return;
    };
    let scratch = tempfile::Builder::new().prefix("overlap-ptxas-").tempdir().unwrap();
    let dir = scratch.path();
    for kernel in KERNEL_SOURCES {
        let compiled = compile(kernel, "sm_90").unwrap_or_else(|e| panic!("{e}"));
        let ptx = dir.join(kernel.file.replace(".cu", ".ptx"));
        std::fs::write(&ptx, &compiled.ptx).unwrap();
        let out = std::process::Command::new(&ptxas)
            .args(["-arch=sm_90", "-v", "-o", "/dev/null"])
            .arg(&ptx)
            .output()
            .expect("ptxas runs");
        let report = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "ptxas rejected {}:\n{report}", kernel.file);
        let usage = resource_usage(&report);
        assert_eq!(usage.len(), kernel.kernels.len(), "{}: one report line per kernel:\n{report}", kernel.file);
        for (name, registers, stores, loads) in usage {
            println!(
                "{}: {name}: {registers} registers, {stores} bytes spill stores, {loads} bytes spill loads",
                kernel.file
            );
            assert_eq!((stores, loads), (0, 0), "{name} spills registers");
        }
    }
}

#[test]
fn the_ptxas_report_is_read_per_kernel() {
    let report = "ptxas info    : 0 bytes gmem\n\
        ptxas info    : Compiling entry function 'relu_forward' for 'sm_90'\n\
        ptxas info    : Function properties for relu_forward\n\
        \x20   8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
        ptxas info    : Used 10 registers, 372 bytes cmem[0]\n";
    assert_eq!(resource_usage(report), vec![("relu_forward".to_string(), 10, 4, 12)]);
}
