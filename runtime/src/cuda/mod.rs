//! The CUDA backend (feature `cuda`): one GPU per process, cuBLAS for the products, CUDA C
//! kernels compiled by NVRTC once per process, NCCL on its own stream ordered by events.
//!
//! - `kernels`: the `.cu` sources and their NVRTC compilation (needs no GPU: CI compiles every
//!   kernel with the `nvidia-cuda-nvrtc-cu12` wheel's libnvrtc);
//! - `libraries`: where cuBLAS, NVRTC and NCCL are on this machine, loaded before cudarc asks;
//! - `gpu`: context, compute and communication streams, cuBLAS, the loaded kernels;
//! - `ops`: one layer operation at a time, queued on the compute stream, in the grids of
//!   `launch_shapes` and the cuBLAS arguments of `products` (plain arithmetic, shared with the
//!   kernels' CPU emulation);
//! - `nccl`: bucket all-reduces (or reduce-scatters) on the communication stream, and their
//!   in-flight handles;
//! - `optim`: optimizer state on the device and the fused updates;
//! - `storage`: the program's values on the GPU (`Cuda`: tensors, buckets, in-flight tickets,
//!   the batch's rows grouped by token, `token_rows`, for the embedding's backward);
//! - `params`: parameters and optimizer state on the device, to and from the host model;
//! - `shards`: sharded optimizer state: this rank's parts, and the all-gathers of the updates;
//! - `program`: the calls of the program `#[distributed_model]` emits, queued on the streams;
//!   `attention`: causal self-attention's products and softmax among them;
//! - `loss`: softmax cross-entropy on the device;
//! - `timing`: trace spans from CUDA events; `backend`: the GPU behind the `Trainer`'s loop.
//!
//! cudarc loads every CUDA library at run time, so this builds without a toolkit or GPU.

mod attention;
mod backend;
mod clip;
mod gpu;
mod kernels;
mod launch_shapes;
pub mod libraries;
mod loss;
mod nccl;
pub mod ops;
mod optim;
mod params;
mod products;
mod program;
mod shards;
mod storage;
mod timing;
mod token_rows;

pub use backend::{GpuBackend, GpuSetup};
pub use gpu::{driver_cuda_version, driver_present, gpu_count, Gpu};
pub use kernels::{compile, nvrtc_available, CompiledKernels, KernelSource, KERNEL_SOURCES};
pub use loss::{cross_entropy, GpuCrossEntropy};
pub use nccl::{EventPair, GpuComm, GpuInFlight};
pub use optim::{adamw_update, sgd_update, GpuOptimizer};
pub use params::GpuParams;
pub use program::{check_supported, GpuExec, GpuStep};
pub use shards::GpuShards;
pub use storage::{Cuda, GpuSaved, GpuTensor, GpuTicket, GpuTokenRows, NoLowRank};
pub use timing::Timeline;
