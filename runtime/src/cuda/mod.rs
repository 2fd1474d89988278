//! The CUDA backend (feature `cuda`): one GPU per process, cuBLAS for the products, CUDA C
//! kernels compiled by NVRTC once per process, NCCL on its own stream ordered by events.
//!
//! - `kernels`: the `.cu` sources and their NVRTC compilation (needs no GPU: CI compiles every
//!   kernel with the `nvidia-cuda-nvrtc-cu12` wheel's libnvrtc);
//! - `libraries`: where cuBLAS, NVRTC and NCCL are on this machine, loaded before cudarc asks;
//! - `gpu`: context, compute and communication streams, cuBLAS, the loaded kernels;
//! - `ops`: one layer operation at a time, queued on the compute stream;
//! - `nccl`: bucket all-reduces on the communication stream, and their in-flight handles;
//! - `optim`: optimizer state on the device and the fused updates;
//! - `model`: a `#[distributed_model]` executed from its compiled schedule;
//! - `timing`: trace spans from CUDA events; `backend`: the GPU behind the `Trainer`'s loop.
//!
//! cudarc loads every CUDA library at run time, so this builds without a toolkit or GPU.

mod backend;
mod gpu;
mod kernels;
pub mod libraries;
mod model;
mod nccl;
pub mod ops;
mod optim;
mod timing;

pub use backend::{GpuBackend, GpuSetup};
pub use gpu::{driver_cuda_version, driver_present, gpu_count, Gpu};
pub use kernels::{compile, nvrtc_available, CompiledKernels, KernelSource, KERNEL_SOURCES};
pub use model::{check_supported, GpuModel};
pub use nccl::{EventPair, GpuComm, GpuInFlight};
pub use optim::GpuOptimizer;
pub use timing::Timeline;
