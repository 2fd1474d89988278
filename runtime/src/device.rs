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
    Err(crate::error::Error::CudaNotBuilt)
}

/// `--cuda-libraries`: the driver's CUDA version and where each library was found.
#[cfg(feature = "cuda")]
pub fn print_cuda_libraries() -> Result<()> {
    use crate::cuda::libraries::{locate, nccl_findable, nccl_link, SearchEnv};
    use crate::error::Error;
    match crate::cuda::driver_cuda_version() {
        Some((major, minor)) => println!("driver    supports CUDA {major}.{minor}"),
        None => println!("driver    not found (libcuda.so.1 could not be loaded)"),
    }
    let located = locate(&SearchEnv::from_process());
    print!("{located}");
    if let (Some(nccl), false) = (located.get("NCCL"), nccl_findable()) {
        // Other programs (the GPU tests) need this folder on LD_LIBRARY_PATH; training restarts
        // itself with it.
        let dir = nccl_link(&nccl.path).map_err(|e| Error::Cuda(format!("making the NCCL link: {e}")))?;
        println!("NCCL link {}", dir.join("libnccl.so").display());
    }
    located.require_all().map_err(Error::Cuda)
}

/// Without the `cuda` feature no CUDA library is ever loaded.
#[cfg(not(feature = "cuda"))]
pub fn print_cuda_libraries() -> Result<()> {
    Err(crate::error::Error::CudaNotBuilt)
}
