//! Communicators: who the other ranks are and how gradients get summed across them.
//!
//! A private enum picks the implementation: a single process (no MPI at all), or OpenMPI driven
//! from a dedicated thread (see `mpi_thread`). GPU communicators will join it as variants.

mod bucket;
mod mpi_thread;

pub use bucket::{GradBucket, InFlight};

use std::cell::RefCell;
use std::sync::mpsc::{channel, Sender};

use overlap_plan::Schedule;

use crate::error::{Error, Result};
use mpi_thread::MpiThread;

/// When bucket all-reduces start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CommMode {
    /// As soon as backward completes a bucket: the compiled, interleaved schedule.
    #[default]
    Overlap,
    /// Only once the whole backward has finished: the baseline the overlap is measured against.
    /// Everything else (the code, the reductions and their order) is the same.
    AfterBackward,
}

/// The ranks of one training job.
pub struct Communicator {
    backend: Backend,
    mode: CommMode,
    /// In `AfterBackward` mode, reductions held back until `backward_done`.
    held: RefCell<Vec<(GradBucket, Sender<GradBucket>)>>,
}

enum Backend {
    Single,
    Mpi(MpiThread),
}

impl Communicator {
    /// One process, no MPI: every collective is the identity.
    pub fn single() -> Self {
        Self::with_backend(Backend::Single)
    }

    /// MPI when started by `mpirun`, a single process otherwise.
    pub fn from_env() -> Result<Self> {
        if launched_by_mpirun() {
            Ok(Self::with_backend(Backend::Mpi(MpiThread::start()?)))
        } else {
            Ok(Self::single())
        }
    }

    fn with_backend(backend: Backend) -> Self {
        Communicator { backend, mode: CommMode::Overlap, held: RefCell::default() }
    }

    pub fn with_mode(mut self, mode: CommMode) -> Self {
        self.mode = mode;
        self
    }

    pub fn mode(&self) -> CommMode {
        self.mode
    }

    pub fn rank(&self) -> usize {
        match &self.backend {
            Backend::Single => 0,
            Backend::Mpi(t) => t.rank(),
        }
    }

    pub fn world_size(&self) -> usize {
        match &self.backend {
            Backend::Single => 1,
            Backend::Mpi(t) => t.world_size(),
        }
    }

    /// Starts summing `bucket` over all ranks, in place, and returns the handle that owns it
    /// until the sum is ready. Every rank must launch the same buckets in the same order (the
    /// compiled schedule guarantees it).
    pub fn all_reduce_async(&self, bucket: GradBucket) -> InFlight {
        match &self.backend {
            Backend::Single => InFlight::ready(bucket),
            Backend::Mpi(t) => {
                let (tx, rx) = channel();
                let index = bucket.index();
                match self.mode {
                    CommMode::Overlap => t.all_reduce(bucket, tx),
                    CommMode::AfterBackward => self.held.borrow_mut().push((bucket, tx)),
                }
                InFlight::pending(index, rx)
            }
        }
    }

    /// Marks the end of backward; in `AfterBackward` mode this is when the held reductions start.
    pub fn backward_done(&self) {
        if let Backend::Mpi(t) = &self.backend {
            for (bucket, reply) in self.held.take() {
                t.all_reduce(bucket, reply);
            }
        }
    }

    /// Replaces `data` on every rank with rank 0's values.
    pub fn broadcast_from_root(&self, data: &mut [f32]) -> Result<()> {
        match &self.backend {
            Backend::Single => Ok(()),
            Backend::Mpi(t) => {
                let values = t.broadcast(data.to_vec())?;
                data.copy_from_slice(&values);
                Ok(())
            }
        }
    }

    /// Sum of `value` over all ranks (blocking; for metrics such as the loss, not gradients).
    pub fn sum_f64(&self, value: f64) -> Result<f64> {
        match &self.backend {
            Backend::Single => Ok(value),
            Backend::Mpi(t) => t.sum_f64(value),
        }
    }

    /// `value` from every rank, indexed by rank.
    pub fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        match &self.backend {
            Backend::Single => Ok(vec![value]),
            Backend::Mpi(t) => t.all_gather_u64(value),
        }
    }

    pub fn barrier(&self) -> Result<()> {
        match &self.backend {
            Backend::Single => Ok(()),
            Backend::Mpi(t) => t.barrier(),
        }
    }

    /// Fails on every rank, naming the ranks that differ from rank 0, unless all ranks compiled
    /// the same schedule. Runs before any gradient is exchanged, so a mismatch cannot hang.
    pub fn check_same_schedule(&self, schedule: &Schedule) -> Result<()> {
        let fingerprints = self.all_gather_u64(schedule.fingerprint())?;
        let differing: Vec<usize> = (0..fingerprints.len()).filter(|&r| fingerprints[r] != fingerprints[0]).collect();
        if differing.is_empty() {
            Ok(())
        } else {
            Err(Error::ScheduleMismatch { model: schedule.model.to_string(), differing, fingerprints })
        }
    }
}

/// OpenMPI's `mpirun` (and PMIx launchers) set these in every rank's environment.
fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"].iter().any(|v| std::env::var_os(v).is_some())
}
