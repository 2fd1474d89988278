//! Where a model trains (`--device`): the CPU code the macro emits, or the CUDA backend, which
//! is compiled only with the `cuda` feature; without it `--device cuda` is a clear error, not a
//! missing flag.

use crate::args::TrainArgs;
use crate::comm::Communicator;
use crate::error::Result;
use crate::model::DistributedModel;
use crate::train::TrainSummary;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Device {
    /// This process's CPU (one thread computes, one communicates).
    #[default]
    Cpu,
    /// One NVIDIA GPU per process: cuBLAS, NVRTC kernels, NCCL (needs the `cuda` feature).
    Cuda,
}

/// The GPU this rank uses: `--gpu`, else the MPI local rank (one process per GPU).
pub fn gpu_ordinal(args: &TrainArgs) -> usize {
    args.gpu
        .unwrap_or_else(|| std::env::var("OMPI_COMM_WORLD_LOCAL_RANK").ok().and_then(|r| r.parse().ok()).unwrap_or(0))
}

/// Trains on the GPU.
#[cfg(feature = "cuda")]
pub fn train_on_gpu<M: DistributedModel>(args: &TrainArgs, comm: &Communicator) -> Result<TrainSummary> {
    crate::cuda::train::<M>(args, comm)
}

/// Without the `cuda` feature there is no GPU backend to train on.
#[cfg(not(feature = "cuda"))]
pub fn train_on_gpu<M: DistributedModel>(_: &TrainArgs, _: &Communicator) -> Result<TrainSummary> {
    Err(crate::error::Error::CudaNotBuilt)
}
