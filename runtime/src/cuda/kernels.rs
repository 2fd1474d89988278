//! The kernel sources, one `.cu` file per op family, and their NVRTC compilation with the
//! compiler's log kept, so that warnings are seen and not only errors.

use std::ffi::{c_char, CString};

use cudarc::nvrtc::result;

/// One CUDA C translation unit of the backend.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    pub file: &'static str,
    pub source: &'static str,
    /// The `extern "C"` kernels it defines.
    pub kernels: &'static [&'static str],
}

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
        file: "optim.cu",
        source: include_str!("kernels/optim.cu"),
        kernels: &["sgd_update", "adamw_update"],
    },
];

/// PTX and everything the compiler said while producing it.
#[derive(Clone, Debug)]
pub struct CompiledKernels {
    pub ptx: String,
    /// NVRTC's log: empty when it had nothing to say (no warnings).
    pub log: String,
}

/// Whether `libnvrtc` can be loaded (cudarc panics on first use otherwise).
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to open the library by its usual names; no symbol is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compiles `kernel` for `arch` (`sm_80`, `sm_90`, ...). Errors carry NVRTC's log.
pub fn compile(kernel: &KernelSource, arch: &str) -> Result<CompiledKernels, String> {
    if !nvrtc_available() {
        return Err("libnvrtc is not available (install the nvidia-cuda-nvrtc-cu12 wheel)".into());
    }
    let source = CString::new(kernel.source).map_err(|e| format!("{}: {e}", kernel.file))?;
    let name = CString::new(kernel.file).map_err(|e| format!("{}: {e}", kernel.file))?;
    let program = result::create_program(&source, Some(&name)).map_err(|e| format!("{}: {e:?}", kernel.file))?;
    let options = [format!("--gpu-architecture={arch}"), "--std=c++17".to_string()];
    // SAFETY: `program` was just created and is destroyed once, below, after the last use;
    // the options are owned strings that outlive the call.
    let compiled = unsafe { result::compile_program(program, &options) };
    // SAFETY: as above; the log and the PTX are copied out before the program is destroyed.
    let log = unsafe { result::get_program_log(program) }.map(text).unwrap_or_default();
    let ptx = compiled.and_then(|()| {
        // SAFETY: as above.
        unsafe { result::get_ptx(program) }.map(text)
    });
    // SAFETY: the program is not used after this.
    let _ = unsafe { result::destroy_program(program) };
    match ptx {
        Ok(ptx) => Ok(CompiledKernels { ptx, log }),
        Err(e) => Err(format!("{} for {arch}: {e:?}\n{log}", kernel.file)),
    }
}

/// A NUL-terminated C string from NVRTC as text.
fn text(bytes: Vec<c_char>) -> String {
    let bytes: Vec<u8> = bytes.into_iter().take_while(|&c| c != 0).map(|c| c as u8).collect();
    String::from_utf8_lossy(&bytes).trim_end().to_string()
}
