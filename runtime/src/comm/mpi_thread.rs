//! OpenMPI driven from one dedicated thread.
//!
//! Measured on this project's machines: OpenMPI's non-blocking collectives do not progress in
//! the background (an `MPI_Iallreduce` of 64 MiB left alone for 1 s still needed the full ~40 ms
//! in `wait`), while a thread sitting in the blocking `MPI_Allreduce` overlaps fully with compute.
//! So this thread initialises MPI, makes every MPI call, and finalises it; the compute thread
//! only sends it requests. MPI objects never leave the thread, so nothing needs to be `Send`.
//! Gradient buckets go through the node's shared memory (`shared_memory`) when every rank is on
//! this node, else through `MPI_Iallreduce` (`mpi_calls`).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use overlap_plan::Link;

use super::board::{self, ProcessState};
use super::bucket::GradBucket;
use super::in_flight::Reduced;
use super::last_words;
use super::mailbox::{Mailbox, Reply, Undelivered};
use super::mode::Transport;
use super::mpi_calls::Gathered;
use super::mpi_server::{serve, Request};
use crate::error::{Error, Result};

pub(super) struct MpiThread {
    /// Bounded, so that sending allocates nothing (an unbounded channel allocates a block every
    /// few dozen messages); a full queue makes the sender wait, which never happens in practice.
    requests: Option<SyncSender<Request>>,
    /// Set when this rank has failed: an all-reduce in progress stops waiting and aborts the job.
    aborting: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    rank: usize,
    world_size: usize,
    /// What carries the gradient all-reduces: `SharedMemory` or `Mpi`, never `Auto`.
    transport: Transport,
    flushed: RefCell<Arc<Mailbox<()>>>,
    /// How long a blocking call (a barrier, a metric's sum) waits before failing.
    timeout: Cell<Option<Duration>>,
    /// Set once a call timed out: the thread is then stuck in a collective, and dropping this
    /// must end the job rather than wait for the thread.
    timed_out: Cell<bool>,
    /// Why this rank's last run failed, while no `abort_job` has settled it: dropping this then
    /// ends the job (unless every rank failed too), printing it first.
    failure: RefCell<Option<String>>,
}

impl MpiThread {
    /// Initialises MPI on a new thread; `transport` chooses how gradients are summed. Fails,
    /// naming the ranks that did not arrive, when start-up (MPI's initialisation and the
    /// shared-memory set-up, both collective) takes longer than `timeout`.
    pub(super) fn start(transport: Transport, timeout: Option<Duration>) -> Result<Self> {
        let board = board::open();
        let (requests, inbox) = sync_channel(REQUEST_QUEUE);
        let (ready_tx, ready) = channel();
        let aborting = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&aborting);
        let thread = std::thread::Builder::new()
            .name("overlap-mpi".into())
            .spawn(move || serve(inbox, ready_tx, &flag, transport, board))
            .map_err(|e| Error::MpiInit(format!("cannot start the communication thread: {e}")))?;
        let started = match timeout {
            Some(timeout) => ready.recv_timeout(timeout),
            None => ready.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let (rank, world_size, transport) = match started {
            Ok(Ok(started)) => started,
            // Every rank refused alike (the transports they chose): none reaches READY.
            Ok(Err(why)) => {
                board.inspect(|b| b.unlink());
                return Err(Error::MpiInit(why));
            }
            Err(RecvTimeoutError::Disconnected) => return Err(Error::CommThreadDied("initialising MPI")),
            // The thread stays blocked in MPI; the process exits with the error and the launcher
            // ends the job.
            Err(RecvTimeoutError::Timeout) => {
                let behind = board::laggards();
                // No rank will reach READY to remove the board: each failing rank does.
                board.inspect(|b| b.unlink());
                return Err(Error::StartupTimeout {
                    rank: board.map(|b| b.rank()),
                    waited: timeout.unwrap_or_default(),
                    behind,
                });
            }
        };
        Ok(MpiThread {
            requests: Some(requests),
            aborting,
            thread: Some(thread),
            rank,
            world_size,
            transport,
            flushed: RefCell::default(),
            timeout: Cell::new(timeout),
            timed_out: Cell::new(false),
            failure: RefCell::default(),
        })
    }

    /// How long later blocking calls wait (`None`: as long as the job lives).
    pub(super) fn set_timeout(&self, timeout: Option<Duration>) {
        self.timeout.set(timeout);
    }

    pub(super) fn transport(&self) -> Transport {
        self.transport
    }

    pub(super) fn rank(&self) -> usize {
        self.rank
    }

    pub(super) fn world_size(&self) -> usize {
        self.world_size
    }

    /// Queues an in-place sum; the bucket comes back on `reply` when it is done. Requests are
    /// served in order, so every rank runs the collectives in the order its schedule launches them.
    pub(super) fn all_reduce(&self, bucket: GradBucket, reply: Reply<Reduced>) {
        // A send error means the thread is gone; dropping `reply` makes the wait report it.
        let _ = self.send(Request::AllReduce(bucket, reply));
    }

    /// Queues the all-gather of elements `elements` of bucket `bucket`'s updated shards, whose
    /// reduce-scatter was queued before; the parameters come back on `reply`.
    pub(super) fn all_gather(
        &self,
        bucket: usize,
        elements: std::ops::Range<usize>,
        reply: Reply<super::gathering::GatheredParams>,
    ) {
        // A send error means the thread is gone; dropping `reply` makes the wait report it.
        let _ = self.send(Request::AllGather { bucket, elements, reply });
    }

    /// Queues the step's clip of the sharded buckets queued before it (`ShardServer::clip`),
    /// which returns them to their wait points.
    pub(super) fn clip_shards(&self) {
        // A send error means the thread is gone; the buckets' waits report it.
        let _ = self.send(Request::ClipShards);
    }

    /// Holds each later all-reduce until `link`'s ring cost model says it would have finished.
    pub(super) fn emulate_link(&self, link: Option<Link>) -> Result<()> {
        self.send(Request::EmulateLink(link))
    }

    /// Blocks until every request queued so far has been served (every step without overlap:
    /// through a reused mailbox, so it allocates nothing), at most the communication timeout:
    /// the all-reduces ahead of the flush wait for every rank.
    pub(super) fn flush(&self) -> Result<()> {
        const WHAT: &str = "finishing the queued all-reduces";
        let (reply, pending) = Mailbox::open(&mut self.flushed.borrow_mut());
        self.send(Request::Flush(reply))?;
        let bound = self.timeout.get();
        pending.wait(bound).map_err(|e| match e {
            Undelivered::Abandoned => Error::CommThreadDied(WHAT),
            Undelivered::TimedOut => self.gave_up(WHAT, bound.unwrap_or_default()),
        })
    }

    pub(super) fn gather_u64(&self, data: Vec<u64>) -> Result<Gathered> {
        self.call(|reply| Request::GatherU64(data, reply), "gathering trace spans")
    }

    /// A barrier that waits up to `bound` (rather than the communication timeout) for `what`.
    /// Waits at a barrier for rank `writer`, busy with something other than communication (a
    /// checkpoint write), up to `bound`; but once its process is seen stopped or gone on this
    /// node, only `patience` more: a stopped process writes nothing.
    pub(super) fn wait_for_writer(
        &self,
        writer: usize,
        bound: Option<Duration>,
        patience: Option<Duration>,
        what: &'static str,
    ) -> Result<()> {
        let (reply, answer) = channel();
        self.send(Request::Barrier(reply))?;
        let started = Instant::now();
        let deadline = bound.and_then(|b| started.checked_add(b));
        let mut stalled_since: Option<Instant> = None;
        loop {
            let tick = deadline.map_or(WRITER_POLL, |d| d.saturating_duration_since(Instant::now()).min(WRITER_POLL));
            match answer.recv_timeout(tick) {
                Ok(()) => return Ok(()),
                Err(RecvTimeoutError::Disconnected) => return Err(Error::CommThreadDied(what)),
                Err(RecvTimeoutError::Timeout) => {}
            }
            let now = Instant::now();
            let stalled =
                board::get().and_then(|b| b.process_state(writer)).is_some_and(|s| s != ProcessState::Running);
            stalled_since = if stalled { stalled_since.or(Some(now)) } else { None };
            let out_of_patience = patience.zip(stalled_since).is_some_and(|(p, since)| now - since >= p);
            if out_of_patience || deadline.is_some_and(|d| now >= d) {
                // Tenths of a second: the message says how long, not to the nanosecond.
                let waited = Duration::from_millis((now - started).as_millis() as u64 / 100 * 100);
                return Err(self.gave_up(what, waited));
            }
        }
    }

    pub(super) fn broadcast(&self, data: Vec<f32>) -> Result<Vec<f32>> {
        self.call(|reply| Request::Broadcast(data, reply), "broadcasting parameters")
    }

    pub(super) fn broadcast_bytes(&self, data: Vec<u8>) -> Result<Vec<u8>> {
        self.call(|reply| Request::BroadcastBytes(data, reply), "broadcasting bytes")
    }

    pub(super) fn sum_f64(&self, value: f64) -> Result<f64> {
        self.call(|reply| Request::SumF64(value, reply), "summing a metric")
    }

    /// Queues the sum of `value` over all ranks; `finish_sum` waits for it.
    pub(super) fn start_sum_f64(&self, value: f64) -> Result<Receiver<f64>> {
        let (reply, answer) = channel();
        self.send(Request::SumF64(value, reply))?;
        Ok(answer)
    }

    /// The sum `start_sum_f64` queued, waited for as long as the communication timeout allows.
    pub(super) fn finish_sum(&self, answer: Receiver<f64>) -> Result<f64> {
        self.await_answer(answer, "summing a metric", self.timeout.get())
    }

    pub(super) fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        self.call(|reply| Request::AllGatherU64(value, reply), "exchanging schedule fingerprints")
    }

    pub(super) fn barrier(&self) -> Result<()> {
        self.call(Request::Barrier, "waiting at a barrier")
    }

    /// See `Communicator::note_failure`.
    pub(super) fn note_failure(&self, failure: Option<String>) {
        *self.failure.borrow_mut() = failure;
    }

    /// Before this thread is dropped with the collective `owed` unfinished. Where the job ends
    /// anyway (a panic, a failure noted, a wait of this thread's that gave up) nothing is added.
    /// A collective a wait ran out on already (`waited_out`) ends the job at once; any other gets
    /// the wait timeout to finish (every rank may have launched it: a loop of one's own that ends
    /// after its last `step`, its all-gathers still running), and past that the job ends.
    pub(super) fn settle_owed(&self, owed: &str, waited_out: bool) {
        if std::thread::panicking() || self.failure.borrow().is_some() || self.timed_out.get() {
            return;
        }
        let (why, ended) = if waited_out {
            ("a wait for it had run out".to_string(), true)
        } else {
            let why = match self.timeout.get() {
                Some(timeout) => format!("it did not finish in the {timeout:?} it was given as the communicator went"),
                None => "the communication thread is gone".to_string(),
            };
            (why, self.flush().is_err())
        };
        if ended {
            self.timed_out.set(true);
            *self.failure.borrow_mut() = Some(format!(
                "the communicator was dropped with {owed} unfinished ({why}): the other ranks may wait in it \
                 forever, so the job ends"
            ));
        }
    }

    /// See `Communicator::abort_job`. Returns once the other ranks met this one at the barrier
    /// (MPI_Abort does not return).
    pub(super) fn abort_job(&self, grace: Duration) {
        self.failure.take();
        self.end_job(grace, None);
    }

    /// `abort_job`, printing `why` (on stderr, naming this rank) if the job is aborted.
    fn end_job(&self, grace: Duration, why: Option<String>) {
        let (reply, done) = channel();
        if let Some(why) = why {
            last_words::leave(format!("rank {}: error: {why}", self.rank));
        }
        if self.send(Request::AbortJob(grace, reply)).is_ok() {
            // The grace period starts once earlier requests are served; a stuck one is ended by
            // the flag after the same grace period.
            if done.recv_timeout(grace).is_err() {
                self.aborting.store(true, Ordering::Relaxed);
                let _ = done.recv();
            }
        }
    }

    fn send(&self, request: Request) -> Result<()> {
        let requests = self.requests.as_ref().expect("requests is only taken in drop");
        requests.send(request).map_err(|_| Error::CommThreadDied("queueing a request"))
    }

    fn call<T>(&self, make: impl FnOnce(Sender<T>) -> Request, what: &'static str) -> Result<T> {
        self.call_within(make, what, self.timeout.get())
    }

    /// Sends a request and waits up to `bound` for its answer.
    fn call_within<T>(
        &self,
        make: impl FnOnce(Sender<T>) -> Request,
        what: &'static str,
        bound: Option<Duration>,
    ) -> Result<T> {
        let (reply, answer) = channel();
        self.send(make(reply))?;
        self.await_answer(answer, what, bound)
    }

    /// Waits up to `bound` for the answer to a request sent.
    fn await_answer<T>(&self, answer: Receiver<T>, what: &'static str, bound: Option<Duration>) -> Result<T> {
        let Some(bound) = bound else { return answer.recv().map_err(|_| Error::CommThreadDied(what)) };
        answer.recv_timeout(bound).map_err(|e| match e {
            RecvTimeoutError::Disconnected => Error::CommThreadDied(what),
            RecvTimeoutError::Timeout => self.gave_up(what, bound),
        })
    }

    /// The error of a wait for the other ranks that ran out after `waited`, naming those behind;
    /// the thread may now be stuck in that collective, so dropping it aborts the job.
    fn gave_up(&self, what: &'static str, waited: Duration) -> Error {
        self.timed_out.set(true);
        Error::CollectiveTimeout { what, rank: self.rank, waited, behind: board::laggards() }
    }
}

impl Drop for MpiThread {
    /// Closing the request channel ends the thread's loop; it then finalises MPI.
    fn drop(&mut self) {
        let failure = self.failure.take();
        if std::thread::panicking() || self.timed_out.get() {
            // The compute thread panicked, or the thread is stuck in a collective some rank never
            // joined: the other ranks would wait for this one forever. (`end_job` sets `aborting`
            // once the failure is recorded, so that a stuck collective aborts saying it.)
            self.end_job(Duration::ZERO, failure);
        } else if let Some(failure) = failure {
            // A run failed here and nothing ended the job: ranks that did not fail may be waiting
            // for this one (ranks that failed alike meet, and all finish normally).
            self.end_job(ABORT_GRACE, Some(failure));
        }
        drop(self.requests.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How long a rank that failed waits for the others to fail too before it aborts the job: ranks
/// that fail alike (a setting every rank refuses) all print their reason and exit normally.
pub const ABORT_GRACE: Duration = Duration::from_secs(2);

/// How often a wait for a writing rank looks at its process.
const WRITER_POLL: Duration = Duration::from_millis(250);

/// Requests that can be queued before a sender waits.
const REQUEST_QUEUE: usize = 1024;
