//! The flags that take one of a few named values (`clap::ValueEnum`), and their runtime
//! counterparts where the names differ.

use clap::ValueEnum;
use overlap_runtime::Transport as RunTransport;

/// Which plan `--print-schedule` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrintSchedule {
    /// The plan this binary was compiled with.
    Compiled,
    /// DDP's rebuilt buckets at its default caps, for the same layers (no boundaries).
    Ddp,
}

/// `--decay-on`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DecayOnArg {
    /// Every parameter, biases and LayerNorm's gains included.
    All,
    /// Only parameters of two or more dimensions: weights and embeddings.
    Matrices,
}

/// `--optimizer`: the command line's names for the runtime's `train::OptimizerKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OptimizerKind {
    /// SGD with momentum (PyTorch's rule).
    Sgd,
    /// AdamW (PyTorch's rule and defaults).
    Adamw,
}

/// `--report`: the command line's names for the runtime's `train::ReportFormat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// A table for people.
    Text,
    /// One JSON document per line on stdout, for scripts: each report, then each --simulate
    /// prediction (log lines then go to stderr).
    Json,
    /// No report (and no recording unless --trace, --timeline, --write-profile or --simulate needs it).
    Off,
}

/// `--device`: the runtime's `train::Device`, less the GPU's index (`--gpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, ValueEnum)]
pub enum Device {
    /// This process's CPU (one thread computes, one communicates).
    #[default]
    Cpu,
    /// One NVIDIA GPU per process: cuBLAS, NVRTC kernels, NCCL (needs the `cuda` feature).
    Cuda,
}

/// `--all-reduce`: the command line's names for the runtime's `Transport`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, ValueEnum)]
pub enum Transport {
    /// Shared memory when every rank is on this node, else MPI.
    #[default]
    Auto,
    /// Each rank sums a part of every chunk in a shared-memory window (one node only).
    SharedMemory,
    /// OpenMPI's own all-reduce.
    Mpi,
}

impl From<Transport> for RunTransport {
    fn from(t: Transport) -> Self {
        match t {
            Transport::Auto => RunTransport::Auto,
            Transport::SharedMemory => RunTransport::SharedMemory,
            Transport::Mpi => RunTransport::Mpi,
        }
    }
}
