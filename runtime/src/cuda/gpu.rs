//! One GPU as this process uses it: its context, a compute stream and a communication stream,
//! cuBLAS bound to the compute stream, and every kernel, compiled by NVRTC once per process for
//! this GPU's architecture.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::Ptx;

use super::kernels::{compile, nvrtc_available, KERNEL_SOURCES};
use crate::error::{Error, Result};

/// Whether libcuda (the driver) can be loaded here.
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library by its usual names; no symbol is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// GPUs this process can see (0 without a driver).
pub fn gpu_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

pub struct Gpu {
    ordinal: usize,
    name: String,
    arch: String,
    /// Kernels, cuBLAS products and optimizer updates run here, in program order.
    compute: Arc<CudaStream>,
    /// NCCL runs here, ordered against `compute` by events only.
    comm: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: HashMap<&'static str, CudaFunction>,
}

impl Gpu {
    /// Opens GPU `ordinal`, or says clearly why it cannot: no driver, no such GPU, no NVRTC or
    /// cuBLAS library, a kernel that does not compile.
    pub fn open(ordinal: usize) -> Result<Self> {
        // cudarc panics on first use of a missing library, hence these checks.
        if !driver_present() {
            return Err(Error::Cuda(
                "no CUDA driver found (libcuda.so could not be loaded): --device cuda needs an NVIDIA GPU and its \
                 driver; use --device cpu otherwise"
                    .into(),
            ));
        }
        // SAFETY: only tries to open the library by its usual names; no symbol is called.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(Error::Cuda("libcublas could not be loaded: install the CUDA 12 runtime libraries".into()));
        }
        if !nvrtc_available() {
            return Err(Error::Cuda(
                "libnvrtc could not be loaded: install the CUDA toolkit or `pip install nvidia-cuda-nvrtc-cu12` and add \
                 its lib folder to LD_LIBRARY_PATH"
                    .into(),
            ));
        }
        let count = CudaContext::device_count().map_err(cuda("counting GPUs"))?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::Cuda(format!(
                "GPU {ordinal} was asked for, but this machine has {count} (--gpu, or the MPI local rank)"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(cuda("creating the context"))?;
        let name = ctx.name().map_err(cuda("reading the GPU name"))?;
        let (major, minor) = ctx.compute_capability().map_err(cuda("reading the compute capability"))?;
        let arch = format!("sm_{major}{minor}");
        let mut kernels = HashMap::new();
        for source in KERNEL_SOURCES {
            let compiled = compile(source, &arch).map_err(Error::Cuda)?;
            let module = ctx.load_module(Ptx::from_src(compiled.ptx)).map_err(cuda(source.file))?;
            for &kernel in source.kernels {
                kernels.insert(kernel, module.load_function(kernel).map_err(cuda(kernel))?);
            }
        }
        let compute = ctx.new_stream().map_err(cuda("creating the compute stream"))?;
        let comm = ctx.new_stream().map_err(cuda("creating the communication stream"))?;
        let blas = CudaBlas::new(Arc::clone(&compute)).map_err(|e| Error::Cuda(format!("cuBLAS: {e:?}")))?;
        Ok(Gpu { ordinal, name, arch, compute, comm, blas, kernels })
    }

    /// `GPU 0 (NVIDIA H200, sm_90)`.
    pub fn describe(&self) -> String {
        format!("GPU {} ({}, {})", self.ordinal, self.name, self.arch)
    }

    pub fn compute(&self) -> &Arc<CudaStream> {
        &self.compute
    }

    pub fn comm(&self) -> &Arc<CudaStream> {
        &self.comm
    }

    pub fn blas(&self) -> &CudaBlas {
        &self.blas
    }

    /// A kernel by its `extern "C"` name; every name in `KERNEL_SOURCES` was loaded in `open`.
    pub fn kernel(&self, name: &str) -> &CudaFunction {
        self.kernels.get(name).unwrap_or_else(|| panic!("kernel `{name}` is not in KERNEL_SOURCES"))
    }

    /// Waits for everything queued on the compute stream (once per step, after the last update).
    pub fn synchronize(&self) -> Result<()> {
        self.compute.synchronize().map_err(cuda("synchronising the compute stream"))
    }
}

/// Wraps a driver error with what was being done.
pub(crate) fn cuda<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> Error {
    move |e| Error::Cuda(format!("{what}: {e:?}"))
}
