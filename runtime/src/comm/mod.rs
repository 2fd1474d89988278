//! Communicators: who the other ranks are and how gradients get summed across them.
//!
//! A private enum picks the implementation: a single process (no MPI at all), or OpenMPI driven
//! from a dedicated thread (`mpi_thread`), which sums buckets through the node's shared memory
//! (`shared_memory`) or OpenMPI's all-reduce (`mpi_calls`). Wait points get their buckets back
//! through reused mailboxes (`mailbox`). A bucket carries the parameters lent to it, updated as
//! it is summed (`lent`); `mode` names when reductions start and what carries them. The values
//! may travel narrowed to bf16 or fp16, summed in FP32 (`wire`, `narrow_shared`, `narrow_mpi`).
//! A rank that waits too long names the ranks behind from the node's progress `board`. The GPU's
//! NCCL communicator is `cuda::GpuComm`. The small collectives outside the gradients' path (metrics,
//! broadcasts, start-up agreements) are in `small_collectives`.

pub(crate) mod backoff;
mod board;
mod bucket;
mod chunk_shape;
mod configure;
mod doorbell;
mod gather;
mod gathering;
mod in_flight;
mod last_words;
mod lent;
mod low_rank;
mod mailbox;
mod mode;
mod mpi_calls;
mod mpi_server;
mod mpi_shards;
mod mpi_thread;
mod narrow_mpi;
mod narrow_shared;
mod parting;
mod settings;
mod shard_launch;
mod shard_server;
mod shared_all_reduce;
mod shared_memory;
mod shared_shards;
mod small_collectives;
mod wire;

pub use bucket::GradBucket;
pub use in_flight::InFlight;

pub use lent::{BucketMember, ParamVecs};
pub use low_rank::{LowRankP, LowRankQ, LowRankState};
pub use mode::{CommMode, Transport};
pub use settings::{CommConfig, DEFAULT_COMM_TIMEOUT};
pub use wire::WireFormat;

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use overlap_plan::Link;

use crate::error::{Error, Result};
use crate::optim::Optimizer;
use crate::trace::recorder::record;
use crate::trace::span::Activity;
use in_flight::{Reduced, WaitChecks};
use mailbox::{Mailbox, Reply};
use mpi_thread::MpiThread;
pub use mpi_thread::ABORT_GRACE;
use wire::WirePlan;

/// How long the other ranks wait for rank 0 to write a checkpoint, at least: a write of
/// gigabytes to a slow disk may take longer than any communication should.
pub const CHECKPOINT_WRITE_TIMEOUT: Duration = Duration::from_secs(1800);

/// The ranks of one training job.
pub struct Communicator {
    backend: Backend,
    /// The run's settings (`CommConfig`) live in cells, so that the `Trainer`, holding the
    /// communicator shared, applies them at the start of `fit`.
    mode: Cell<CommMode>,
    /// The interconnect being emulated, if any.
    link: Cell<Option<Link>>,
    /// What every wait point checks (timeout, finite gradients).
    checks: Cell<WaitChecks>,
    /// How each bucket's gradients travel (see `wire`).
    wire: RefCell<WirePlan>,
    /// In `AfterBackward` mode, reductions held back until `backward_done`.
    held: RefCell<Vec<Held>>,
    /// One mailbox per bucket index, reused every step (see `mailbox`).
    mailboxes: RefCell<Vec<Arc<Mailbox<Reduced>>>>,
    /// A wait timed out (`give_up_waits`): later ones time out at once.
    gave_up: Cell<bool>,
    /// For the exchanges `backward_done` runs and waits for itself (PowerSGD without overlap).
    exchanges: RefCell<Arc<Mailbox<Reduced>>>,
    /// The run's choice to shard the optimizer state (`CommConfig::shard_optimizer`); when it
    /// chose nothing, each model's own (`Schedule::shard_optimizer`, which its buckets carry).
    shard_chosen: Cell<Option<bool>>,
    /// Which buckets (by index) this step reduce-scattered, keeping their parameters for the
    /// all-gathers `launch_gather` then starts.
    sharded_launches: RefCell<Vec<bool>>,
    /// The all-gathers in flight, by their index in launch order, and their reused mailboxes.
    gathers: RefCell<Vec<Option<gathering::GatherSlot>>>,
    gather_mailboxes: RefCell<Vec<Arc<Mailbox<gathering::GatheredParams>>>>,
    /// Whether this step's sharded buckets await a clip not yet asked for (see `shard_server`).
    clip_due: Cell<bool>,
}

impl Drop for Communicator {
    /// A collective still owed when the communicator goes (a wait that timed out, a handle
    /// dropped unwaited) may never finish: the communication thread can be stuck in it, waiting
    /// for ranks that will not come, and finalising MPI would then hang this rank and the
    /// others (see `MpiThread::settle_owed`).
    fn drop(&mut self) {
        // What never reached the thread is owed by nobody.
        self.held.get_mut().clear();
        if let (Backend::Mpi(t), Some((owed, waited_out))) = (&self.backend, self.owed()) {
            t.settle_owed(&owed, waited_out || self.gave_up.get());
        }
    }
}

impl Communicator {
    /// The first collective whose reply the communication thread still owes, in words, and
    /// whether a wait for it ran out already.
    fn owed(&self) -> Option<(String, bool)> {
        let boxes = self.mailboxes.borrow();
        if let Some((bucket, owed)) = boxes.iter().enumerate().find(|(_, m)| m.is_outstanding()) {
            return Some((format!("bucket {bucket}'s reduction"), owed.waited_out()));
        }
        let exchange = self.exchanges.borrow();
        if exchange.is_outstanding() {
            return Some(("a PowerSGD exchange".to_string(), exchange.waited_out()));
        }
        let gathers = self.gather_mailboxes.borrow();
        let (group, owed) = gathers.iter().enumerate().find(|(_, m)| m.is_outstanding())?;
        Some((format!("all-gather group {group}"), owed.waited_out()))
    }
}

/// What `AfterBackward` mode holds until backward is done.
enum Held {
    /// A bucket to all-reduce.
    Reduce(GradBucket, Reply<Reduced>),
    /// A low-rank bucket whose P and Q exchanges `backward_done` runs in turn.
    LowRank(GradBucket, Reply<Reduced>),
    /// An all-gather of a sharded bucket's updated shards (`elements` of bucket `bucket`).
    Gather { bucket: usize, elements: std::ops::Range<usize>, reply: Reply<gathering::GatheredParams> },
    /// The clip of the sharded buckets before it.
    ClipShards,
}

/// A sum over ranks on its way (`Communicator::start_sum_f64`): the value itself on one process.
pub struct PendingSum(std::result::Result<f64, std::sync::mpsc::Receiver<f64>>);

enum Backend {
    Single,
    Mpi(MpiThread),
}

impl Communicator {
    /// One process, no MPI: every collective is the identity.
    pub fn single() -> Self {
        Self::with_backend(Backend::Single)
    }

    /// MPI when started by `mpirun`, a single process otherwise; gradients go through shared
    /// memory when every rank is on this node.
    ///
    /// Make one per process and keep it: MPI starts once per process, so under `mpirun` a second
    /// call fails (even after the first communicator is dropped). Without a launcher nothing
    /// starts, and each call gives a world of one: a program that calls it twice runs alone and
    /// fails under `mpirun`.
    pub fn from_env() -> Result<Self> {
        Self::from_env_with(Transport::Auto)
    }

    /// As `from_env`, with gradients summed by `transport`.
    pub fn from_env_with(transport: Transport) -> Result<Self> {
        Self::start(transport, Some(DEFAULT_COMM_TIMEOUT))
    }

    /// As `from_env_with`, with `timeout` bounding every wait for the other ranks, start-up
    /// included (`None`: wait as long as the job lives); see `set_wait_timeout`.
    pub fn start(transport: Transport, timeout: Option<Duration>) -> Result<Self> {
        let mut comm = if launched_by_mpirun() {
            Self::with_backend(Backend::Mpi(MpiThread::start(transport, timeout)?))
        } else {
            Self::single()
        };
        comm.set_wait_timeout(timeout);
        Ok(comm)
    }

    /// Starts with `config`'s transport and wait timeout, then applies the rest of it: what the
    /// command line does with its flags.
    pub fn start_with(config: &CommConfig) -> Result<Self> {
        let comm = Self::start(config.transport, config.wait_timeout)?;
        comm.apply(config)?;
        Ok(comm)
    }

    fn with_backend(backend: Backend) -> Self {
        let rank = match &backend {
            Backend::Single => 0,
            Backend::Mpi(t) => t.rank(),
        };
        let checks = WaitChecks { rank, timeout: Some(DEFAULT_COMM_TIMEOUT), finite: false };
        Communicator {
            backend,
            mode: Cell::new(CommMode::Overlap),
            link: Cell::new(None),
            checks: Cell::new(checks),
            wire: RefCell::default(),
            held: RefCell::default(),
            mailboxes: RefCell::default(),
            gave_up: Cell::new(false),
            exchanges: RefCell::default(),
            shard_chosen: Cell::new(None),
            sharded_launches: RefCell::default(),
            gathers: RefCell::default(),
            gather_mailboxes: RefCell::default(),
            clip_due: Cell::new(false),
        }
    }

    /// Ends the whole job after this rank failed. Waits up to `grace` for the other ranks to
    /// fail too (then every rank has printed its reason and all exit normally); if they do not
    /// arrive, they are stuck waiting for this rank, and MPI_Abort ends them.
    pub fn abort_job(&self, grace: Duration) {
        if let Backend::Mpi(t) = &self.backend {
            t.abort_job(grace);
        }
    }

    /// Records why a run failed on this rank (`None`: the latest run did not): unless
    /// `abort_job` is called first, dropping the communicator then ends the job as `abort_job`
    /// does with `ABORT_GRACE`, printing `failure` (naming this rank) if the other ranks did not
    /// fail too, so that a program's `fit(..)?` never leaves them waiting.
    pub(crate) fn note_failure(&self, failure: Option<&Error>) {
        if let Backend::Mpi(t) = &self.backend {
            t.note_failure(failure.map(Error::to_string));
        }
    }

    /// What sums the gradients: `None` for a single process (nothing to sum).
    pub fn transport(&self) -> Option<Transport> {
        match &self.backend {
            Backend::Single => None,
            Backend::Mpi(t) => Some(t.transport()),
        }
    }

    /// This process's rank, from 0.
    pub fn rank(&self) -> usize {
        match &self.backend {
            Backend::Single => 0,
            Backend::Mpi(t) => t.rank(),
        }
    }

    /// How many ranks the job has.
    pub fn world_size(&self) -> usize {
        match &self.backend {
            Backend::Single => 1,
            Backend::Mpi(t) => t.world_size(),
        }
    }

    /// Starts summing `bucket` over all ranks, in place, and returns the handle that owns it
    /// until the sum is ready. Every rank must launch the same buckets in the same order (the
    /// compiled schedule guarantees it).
    pub fn all_reduce_async(&self, mut bucket: GradBucket) -> InFlight {
        let t = match &self.backend {
            Backend::Mpi(t) if self.mode.get() != CommMode::Skip => t,
            _ => {
                // Nothing travels, so nothing is rounded.
                bucket.set_wire_format(WireFormat::Fp32);
                bucket.update_lent_and_clear();
                return InFlight::ready(bucket, self.checks.get());
            }
        };
        let (index, bytes) = (bucket.index(), self.choose_wire_format(&mut bucket));
        let (reply, pending) = self.mailbox(index);
        let queued = Instant::now();
        if self.mode.get() == CommMode::AfterBackward {
            self.held.borrow_mut().push(Held::Reduce(bucket, reply));
        } else {
            t.all_reduce(bucket, reply);
        }
        InFlight::pending(index, bytes, queued, pending, self.checks.get())
    }

    /// Sets the format `bucket` travels in (the run's choice, else the schedule's) and returns
    /// the bytes one rank sends of it.
    fn choose_wire_format(&self, bucket: &mut GradBucket) -> usize {
        let format = self.wire.borrow().of(bucket.index(), bucket.planned_wire_format());
        bucket.set_wire_format(format);
        bucket.len() * format.bytes_per_value()
    }

    /// `all_reduce_async`, with the bucket's parameters, `members`, and their optimizer state
    /// lent to it so that they are updated as the gradients are summed (see
    /// `GradBucket::lend_for_update`). With `--check-finite` nothing is lent: the wait point
    /// checks the sums before any update. With sharded optimizer state, every bucket is lent, its
    /// updates waiting for the check (see `lend_shard`).
    pub fn all_reduce_and_update<P: ParamVecs, O: Optimizer>(
        &self,
        mut bucket: GradBucket,
        members: &[BucketMember],
        params: &mut P,
        optimizer: &mut O,
        grad_scale: f32,
    ) -> InFlight {
        let sharded = self.shards(&bucket);
        self.note_sharded_launch(bucket.index(), sharded);
        if sharded {
            self.lend_shard(&mut bucket, members, params, optimizer, grad_scale);
        } else if !self.checks.get().finite {
            bucket.lend_for_update(members, params, optimizer, grad_scale);
        }
        self.all_reduce_async(bucket)
    }

    /// After one wait timed out: every bucket awaited, now or launched later, times out at once
    /// rather than after a timeout of its own (the rank they wait for is the same, and the run
    /// ends with the first).
    pub(crate) fn give_up_waits(&self) {
        self.gave_up.set(true);
        self.mailboxes.borrow().iter().for_each(|m| m.give_up());
    }

    /// The ends of bucket `index`'s mailbox, reused from step to step.
    fn mailbox(&self, index: usize) -> (Reply<Reduced>, mailbox::Pending<Reduced>) {
        let mut boxes = self.mailboxes.borrow_mut();
        if boxes.len() <= index {
            boxes.resize_with(index + 1, Arc::default);
        }
        let ends = Mailbox::open(&mut boxes[index]);
        if self.gave_up.get() {
            boxes[index].give_up();
        }
        ends
    }

    /// Marks the end of backward. In `AfterBackward` mode this is when the held reductions start,
    /// and it blocks until all of them are done, as a step without overlap does.
    pub fn backward_done(&self) {
        self.ask_for_clip();
        if let Backend::Mpi(t) = &self.backend {
            let mut held = self.held.borrow_mut();
            if held.is_empty() {
                return;
            }
            // Drained, not taken: the vector keeps its capacity for the next step.
            for entry in held.drain(..) {
                match entry {
                    Held::Reduce(bucket, reply) => t.all_reduce(bucket, reply),
                    Held::LowRank(bucket, reply) => {
                        if self.low_rank_after_backward(t, bucket, reply).is_err() {
                            // Timed out, every wait given up: the rest would each wait as long
                            // again behind it. Their replies, dropped, leave them timed out.
                            return;
                        }
                    }
                    Held::Gather { bucket, elements, reply } => t.all_gather(bucket, elements, reply),
                    Held::ClipShards => t.clip_shards(),
                }
            }
            drop(held);
            let blocked = Instant::now();
            // Each bucket's wait reports a failure: at once after a timeout here, which already
            // waited as long as the timeout says; if the thread is gone, as its reply was dropped.
            match t.flush() {
                Ok(()) => record(Activity::WaitAll, blocked, Instant::now()),
                Err(Error::CollectiveTimeout { .. }) => self.give_up_waits(),
                Err(_) => {}
            }
        }
    }
}

/// OpenMPI's `mpirun` (and PMIx launchers) set these in every rank's environment.
pub(crate) fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"].iter().any(|v| std::env::var_os(v).is_some())
}
