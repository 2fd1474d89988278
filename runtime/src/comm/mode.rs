//! How a run's gradients are summed: when the all-reduces start (`CommMode`) and through what
//! (`Transport`), as the command line and the reports name them.

/// When bucket all-reduces start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CommMode {
    /// As soon as backward completes a bucket: the compiled, interleaved schedule.
    #[default]
    Overlap,
    /// Only once the whole backward has finished: the baseline the overlap is measured against.
    /// Everything else (the code, the reductions and their order) is the same.
    AfterBackward,
    /// No reductions at all: every rank keeps its own gradients. Only for measuring compute
    /// alone (`--compute-only`); the ranks' parameters drift apart.
    Skip,
}

impl CommMode {
    /// `overlap`, `no-overlap` or `compute-only`, as reports and the command line say it.
    pub fn name(self) -> &'static str {
        match self {
            CommMode::Overlap => "overlap",
            CommMode::AfterBackward => "no-overlap",
            CommMode::Skip => "compute-only",
        }
    }
}

/// What sums the gradient buckets across ranks (`--all-reduce`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Transport {
    /// Shared memory when every rank is on this node, else MPI.
    #[default]
    Auto,
    /// Each rank sums a part of every chunk in a shared-memory window (one node only).
    SharedMemory,
    /// OpenMPI's own all-reduce.
    Mpi,
}

impl Transport {
    /// `shared-memory` or `mpi` (or `auto`), as the command line and reports say it.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::SharedMemory => "shared-memory",
            Transport::Mpi => "mpi",
        }
    }
}
