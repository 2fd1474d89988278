//! What a process does about CUDA before anything else starts, with or without the `cuda`
//! feature: find and load the libraries (restarting once if NCCL needs it), or print where they
//! are. Without the feature both say that this binary has no CUDA support.

use crate::error::Result;

/// Finds and loads the CUDA libraries before MPI or any thread starts, restarting the program
/// once if NCCL needs a folder on `LD_LIBRARY_PATH` (see `cuda::libraries`).
#[cfg(feature = "cuda")]
pub fn prepare_cuda_process() -> Result<()> {
    if !crate::cuda::driver_present() {
        return Ok(()); // opening the GPU says so, first of all
    }
    crate::cuda::libraries::restart_if_nccl_is_unnamed().map_err(crate::error::Error::Cuda)
}

/// Without the `cuda` feature there is nothing to prepare; training says why it cannot start.
#[cfg(not(feature = "cuda"))]
pub fn prepare_cuda_process() -> Result<()> {
    Err(crate::error::Error::CudaNotBuilt("`TrainConfig::device` cuda"))
}

/// `--cuda-libraries`: the driver's CUDA version, where each library was found, and OpenBLAS's
/// kernel set.
#[cfg(feature = "cuda")]
pub fn print_cuda_libraries() -> Result<()> {
    use crate::cuda::libraries::{locate, nccl_link_folder, SearchEnv};
    use crate::error::Error;
    use crate::process::console::out_line;
    match crate::cuda::driver_cuda_version() {
        Some((major, minor)) => out_line(&format!("driver    supports CUDA {major}.{minor}")),
        None => out_line("driver    not found (libcuda.so.1 could not be loaded)"),
    }
    let located = locate(&SearchEnv::from_process());
    crate::process::console::out(&located.to_string());
    // And the CPU's kernel set, which a program's `main` asks OpenBLAS for (restarting once)
    // and the GPU tests' CPU references need set before they start.
    out_line(&crate::host::blas_core::describe());
    // Other programs (the GPU tests) need this folder on LD_LIBRARY_PATH; training restarts
    // itself with it.
    if let Some(dir) = nccl_link_folder(&located).map_err(Error::Cuda)? {
        out_line(&format!("NCCL link {}", dir.join("libnccl.so").display()));
    }
    located.require_all().map_err(Error::Cuda)
}

/// Without the `cuda` feature no CUDA library is ever loaded.
#[cfg(not(feature = "cuda"))]
pub fn print_cuda_libraries() -> Result<()> {
    Err(crate::error::Error::CudaNotBuilt("listing the CUDA libraries"))
}

#[cfg(all(test, not(feature = "cuda")))]
mod tests {
    #[test]
    fn the_refusal_names_what_asked_for_cuda() {
        let libraries = super::print_cuda_libraries().unwrap_err().to_string();
        assert!(libraries.starts_with("listing the CUDA libraries: this binary was built without CUDA"), "{libraries}");
        let device = super::prepare_cuda_process().unwrap_err().to_string();
        assert!(device.starts_with("`TrainConfig::device` cuda: this binary was built without CUDA"), "{device}");
    }
}
