//! The kernel sources, one `.cu` file per op family, and their NVRTC compilation with the
//! compiler's log kept, so that warnings are seen and not only errors.

use std::ffi::{c_char, CString};

use cudarc::nvrtc::result;

use super::libraries;

/// One CUDA C translation unit of the backend.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// The file's name under `kernels/`: NVRTC's name for the program in its messages.
    pub file: &'static str,
    /// The file's CUDA C++ text, built into the binary.
    pub source: &'static str,
    /// The `extern "C"` kernels it defines.
    pub kernels: &'static [&'static str],
}

/// Every kernel file, compiled by `Gpu::open` for the GPU's architecture.
pub const KERNEL_SOURCES: &[KernelSource] = &[
    KernelSource {
        file: "elementwise.cu",
        source: include_str!("kernels/elementwise.cu"),
        kernels: &[
            "bias_add_rows",
            "bias_grad",
            "relu_forward",
            "relu_backward",
            "gelu_forward",
            "gelu_backward",
            "tanh_forward",
            "tanh_backward",
            "sigmoid_forward",
            "sigmoid_backward",
            "add",
            "add_into",
            "dropout",
            "dropout_in_place",
        ],
    },
    KernelSource {
        file: "cross_entropy.cu",
        source: include_str!("kernels/cross_entropy.cu"),
        kernels: &["softmax_cross_entropy"],
    },
    KernelSource {
        file: "layer_norm.cu",
        source: include_str!("kernels/layer_norm.cu"),
        kernels: &["layer_norm_forward", "layer_norm_backward_input", "layer_norm_backward_params"],
    },
    KernelSource {
        file: "attention.cu",
        source: include_str!("kernels/attention.cu"),
        kernels: &["causal_softmax", "causal_softmax_backward"],
    },
    KernelSource {
        file: "embedding.cu",
        source: include_str!("kernels/embedding.cu"),
        kernels: &["embedding_forward", "embedding_backward", "position_forward", "position_backward"],
    },
    KernelSource {
        file: "optim.cu",
        source: include_str!("kernels/optim.cu"),
        kernels: &["sgd_update", "adamw_update", "sum_squares"],
    },
];

/// Machine code for one architecture, its PTX, and everything the compiler said.
#[derive(Clone, Debug)]
pub struct CompiledKernels {
    /// The CUBIN (an ELF image) the GPU loads: machine code, so a newer NVRTC than the driver
    /// cannot fail at module load, as PTX of a newer ISA version would.
    pub cubin: Vec<u8>,
    /// The PTX it was assembled from (for `ptxas` reports and reading).
    pub ptx: String,
    /// NVRTC's log: empty when it had nothing to say (no warnings).
    pub log: String,
}

/// Whether `libnvrtc` can be loaded (cudarc panics on first use otherwise): by its usual name,
/// or else found where users have it (see `libraries`) and opened by its full path.
pub fn nvrtc_available() -> bool {
    if libraries::nvrtc_findable() {
        return true;
    }
    let located = libraries::locate(&libraries::SearchEnv::from_process());
    if let Some(nvrtc) = located.get("NVRTC") {
        let only_nvrtc = libraries::Located { found: vec![nvrtc.clone()], ..located.clone() };
        let _ = libraries::load(&only_nvrtc);
    }
    libraries::nvrtc_findable()
}

/// Compiles `kernel` for the real architecture `arch` (`sm_80`, `sm_90`, ...: NVRTC then emits
/// CUBIN as well as PTX). Errors carry NVRTC's log.
pub fn compile(kernel: &KernelSource, arch: &str) -> Result<CompiledKernels, String> {
    if !nvrtc_available() {
        let located = libraries::locate(&libraries::SearchEnv::from_process());
        let install = libraries::LIBRARIES.iter().find(|l| l.what == "NVRTC").map_or("the CUDA toolkit", |l| l.install);
        return Err(format!("NVRTC is not available:\n{located}NVRTC comes with {install}"));
    }
    let source = CString::new(kernel.source).map_err(|e| format!("{}: {e}", kernel.file))?;
    let name = CString::new(kernel.file).map_err(|e| format!("{}: {e}", kernel.file))?;
    let program = result::create_program(&source, Some(&name)).map_err(|e| format!("{}: {e:?}", kernel.file))?;
    let options = [format!("--gpu-architecture={arch}"), "--std=c++17".to_string()];
    // SAFETY: `program` was just created and is destroyed once, below, after the last use;
    // the options are owned strings that outlive the call.
    let compiled = unsafe { result::compile_program(program, &options) };
    // SAFETY: as above; the log, PTX and CUBIN are copied out before the program is destroyed.
    let log = unsafe { result::get_program_log(program) }.map(text).unwrap_or_default();
    let outputs = compiled.and_then(|()| {
        // SAFETY: as above.
        let ptx = unsafe { result::get_ptx(program) }.map(text)?;
        // SAFETY: as above.
        let cubin = unsafe { cubin(program) }?;
        Ok((ptx, cubin))
    });
    // SAFETY: the program is not used after this.
    let _ = unsafe { result::destroy_program(program) };
    match outputs {
        Ok((_, cubin)) if cubin.is_empty() => {
            Err(format!("{} for {arch}: NVRTC produced no CUBIN (is {arch} a real architecture?)", kernel.file))
        }
        Ok((ptx, cubin)) => Ok(CompiledKernels { cubin, ptx, log }),
        Err(e) => Err(format!("{} for {arch}: {e:?}\n{log}", kernel.file)),
    }
}

/// The CUBIN of a compiled program (cudarc wraps only `nvrtcGetPTX`).
///
/// # Safety
/// `program` was compiled successfully and is not destroyed yet.
unsafe fn cubin(program: cudarc::nvrtc::sys::nvrtcProgram) -> Result<Vec<u8>, result::NvrtcError> {
    use cudarc::nvrtc::sys;
    let mut size = 0usize;
    // SAFETY: the caller's contract; `size` is a valid out-pointer.
    unsafe { sys::nvrtcGetCUBINSize(program, &mut size) }.result()?;
    let mut image = vec![0u8; size];
    // SAFETY: `image` holds the `size` bytes NVRTC just said it will write.
    unsafe { sys::nvrtcGetCUBIN(program, image.as_mut_ptr().cast()) }.result()?;
    Ok(image)
}

/// A NUL-terminated C string from NVRTC as text.
fn text(bytes: Vec<c_char>) -> String {
    let bytes: Vec<u8> = bytes.into_iter().take_while(|&c| c != 0).map(|c| c as u8).collect();
    String::from_utf8_lossy(&bytes).trim_end().to_string()
}
