//! CUDA support (feature `cuda`): the CUDA C kernels of the GPU backend and their compilation
//! with NVRTC, at run time, once per process.
//!
//! This part needs no GPU: NVRTC compiles for any architecture on a machine with only
//! `libnvrtc` (the `nvidia-cuda-nvrtc-cu12` wheel carries it), which is how the kernels are
//! checked in CI. Executing them (cuBLAS for the products, NCCL on its own stream) is the rest of
//! the GPU backend and is not built yet.

mod kernels;

pub use kernels::{compile, nvrtc_available, CompiledKernels, KernelSource, KERNEL_SOURCES};
