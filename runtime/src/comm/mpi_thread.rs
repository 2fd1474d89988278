//! OpenMPI driven from one dedicated thread.
//!
//! Measured on this project's machines: OpenMPI's non-blocking collectives do not progress in
//! the background (an `MPI_Iallreduce` of 64 MiB left alone for 1 s still needed the full ~40 ms
//! in `wait`), while a thread sitting in the blocking `MPI_Allreduce` overlaps fully with compute.
//! So this thread initialises MPI, makes every MPI call, and finalises it; the compute thread
//! only sends it requests. MPI objects never leave the thread, so nothing needs to be `Send`.
//! Gradient buckets go through the node's shared memory (`shared_memory`) when every rank is on
//! this node, else through `MPI_Iallreduce` (`mpi_calls`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Threading;

use overlap_plan::Link;

use super::bucket::{GradBucket, Reduced};
use super::mailbox::{Mailbox, Reply};
use super::mode::Transport;
use super::mpi_calls::{all_reduce_in_place, gather_to_root, poll, Gathered};
use super::shared_memory::SharedMemory;
use crate::error::{Error, Result};

enum Request {
    AllReduce(GradBucket, Reply<Reduced>),
    /// Emulate this link from now on (`None`: run at the machine's own speed).
    EmulateLink(Option<Link>),
    /// Replies once every earlier request has been served.
    Flush(Reply<()>),
    Broadcast(Vec<f32>, Sender<Vec<f32>>),
    BroadcastBytes(Vec<u8>, Sender<Vec<u8>>),
    SumF64(f64, Sender<f64>),
    AllGatherU64(u64, Sender<Vec<u64>>),
    GatherU64(Vec<u64>, Sender<Gathered>),
    Barrier(Sender<()>),
    /// This rank failed: wait up to the grace period for the others at a barrier, else abort.
    AbortJob(Duration, Sender<()>),
}

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
}

/// What the thread tells `start` once MPI is up: rank, world size and the transport in use.
type Started = std::result::Result<(usize, usize, Transport), String>;

impl MpiThread {
    /// Initialises MPI on a new thread; `transport` chooses how gradients are summed.
    pub(super) fn start(transport: Transport) -> Result<Self> {
        let (requests, inbox) = sync_channel(REQUEST_QUEUE);
        let (ready_tx, ready) = channel();
        let aborting = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&aborting);
        let thread = std::thread::Builder::new()
            .name("overlap-mpi".into())
            .spawn(move || serve(inbox, ready_tx, &flag, transport))
            .map_err(|e| Error::MpiInit(format!("cannot start the communication thread: {e}")))?;
        let (rank, world_size, transport) =
            ready.recv().map_err(|_| Error::CommThreadDied("initialising MPI"))?.map_err(Error::MpiInit)?;
        Ok(MpiThread {
            requests: Some(requests),
            aborting,
            thread: Some(thread),
            rank,
            world_size,
            transport,
            flushed: RefCell::default(),
        })
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

    /// Holds each later all-reduce until `link`'s ring cost model says it would have finished.
    pub(super) fn emulate_link(&self, link: Option<Link>) -> Result<()> {
        self.send(Request::EmulateLink(link))
    }

    /// Blocks until every request queued so far has been served (every step without overlap:
    /// through a reused mailbox, so it allocates nothing).
    pub(super) fn flush(&self) -> Result<()> {
        let (reply, pending) = Mailbox::open(&mut self.flushed.borrow_mut());
        self.send(Request::Flush(reply))?;
        pending.wait(None).map_err(|_| Error::CommThreadDied("finishing the queued all-reduces"))
    }

    pub(super) fn gather_u64(&self, data: Vec<u64>) -> Result<Gathered> {
        self.call(|reply| Request::GatherU64(data, reply), "gathering trace spans")
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

    pub(super) fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        self.call(|reply| Request::AllGatherU64(value, reply), "exchanging schedule fingerprints")
    }

    pub(super) fn barrier(&self) -> Result<()> {
        self.call(Request::Barrier, "waiting at a barrier")
    }

    /// See `Communicator::abort_job`. Returns once the other ranks met this one at the barrier
    /// (MPI_Abort does not return).
    pub(super) fn abort_job(&self, grace: Duration) {
        let (reply, done) = channel();
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
        let (reply, answer) = channel();
        self.send(make(reply))?;
        answer.recv().map_err(|_| Error::CommThreadDied(what))
    }
}

impl Drop for MpiThread {
    /// Closing the request channel ends the thread's loop; it then finalises MPI.
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The compute thread panicked: the other ranks would wait for it forever.
            self.aborting.store(true, Ordering::Relaxed);
            self.abort_job(Duration::ZERO);
        }
        drop(self.requests.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(inbox: Receiver<Request>, ready: Sender<Started>, aborting: &AtomicBool, transport: Transport) {
    // Only this thread ever calls MPI, and it is the thread that initialises it: FUNNELED is
    // exactly the guarantee needed.
    let Some((universe, _level)) = mpi::initialize_with_threading(Threading::Funneled) else {
        let _ = ready.send(Err("MPI was already initialised in this process".into()));
        return;
    };
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    // Sleeps between polls should last what they ask for, not the default 50 us of slack.
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only changes this thread's
    // timer slack; a failure leaves the default, which is merely coarser.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    // The compute thread's priority, not a lower one: besides summing, this thread runs the
    // updates of the parameters lent to its buckets, which the step waits for. At nice 10 it got
    // a tenth of a core shared with compute, and on a slow emulated link the chain of reductions
    // then outlasted the link (tower, 128 samples, 0.4 GB/s: 115.5 ms per step against 108.9 at
    // nice 0; mlp unchanged, 57.9 against 58.1).
    // Collective: every rank takes the same branch.
    let shared = match transport {
        Transport::Mpi => None,
        Transport::Auto => SharedMemory::create(&world).ok(),
        Transport::SharedMemory => match SharedMemory::create(&world) {
            Ok(shared) => Some(shared),
            Err(why) => {
                let _ = ready.send(Err(format!("--all-reduce shared-memory is impossible: {why}")));
                return;
            }
        },
    };
    let used = if shared.is_some() { Transport::SharedMemory } else { Transport::Mpi };
    // The first blocking receive on a channel allocates (a thread context and a waiter list,
    // once per thread). Nobody can have sent a request yet, so this one blocks for a moment and
    // does it now rather than inside some training step.
    let _ = inbox.recv_timeout(Duration::from_millis(2));
    if ready.send(Ok((rank, size, used))).is_err() {
        return;
    }
    // A panic below must not reach `universe`'s drop: MPI_Finalize would wait for the other
    // ranks, which wait for this one. Left initialised, the process exits non-zero (its compute
    // thread reports the dead thread) and mpirun ends the job.
    let served =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve_requests(&world, shared, inbox, aborting)));
    if served.is_err() {
        std::mem::forget(universe);
    }
}

/// Serves requests in order until the channel closes; gradients go through `shared` memory when
/// there is one, else through MPI.
fn serve_requests(
    world: &SimpleCommunicator,
    mut shared: Option<SharedMemory>,
    inbox: Receiver<Request>,
    aborting: &AtomicBool,
) {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let mut link: Option<Link> = None;
    let mut all_reduces = 0u64;
    // Replies may find their receiver gone (a handle dropped unwaited); that is not an error.
    for request in inbox {
        match request {
            Request::AllReduce(mut bucket, reply) => {
                all_reduces += 1;
                crate::fault::at_all_reduce(rank, all_reduces);
                let started = Instant::now();
                let (data, lent) = bucket.data_and_lent();
                let reduced = match &mut shared {
                    Some(shared) => shared.all_reduce(data, lent, aborting),
                    None => {
                        let done = all_reduce_in_place(world, data, aborting);
                        if done {
                            lent.update_and_clear(data);
                        }
                        done
                    }
                };
                if !reduced {
                    abort(world);
                }
                if let Some(link) = &link {
                    let bytes = std::mem::size_of_val(bucket.as_slice());
                    let deadline = started + Duration::from_secs_f64(link.ring_all_reduce_seconds(bytes, size));
                    if !hold_until(deadline, aborting) {
                        abort(world);
                    }
                }
                reply.send(Reduced { bucket, started, finished: Instant::now() });
            }
            Request::EmulateLink(emulated) => link = emulated,
            Request::Flush(reply) => reply.send(()),
            Request::GatherU64(data, reply) => {
                let _ = reply.send(gather_to_root(world, &data));
            }
            Request::Broadcast(mut data, reply) => {
                world.process_at_rank(0).broadcast_into(&mut data[..]);
                let _ = reply.send(data);
            }
            Request::BroadcastBytes(mut data, reply) => {
                world.process_at_rank(0).broadcast_into(&mut data[..]);
                let _ = reply.send(data);
            }
            Request::SumF64(value, reply) => {
                let mut sum = 0.0f64;
                world.all_reduce_into(&value, &mut sum, SystemOperation::sum());
                let _ = reply.send(sum);
            }
            Request::AllGatherU64(value, reply) => {
                let mut all = vec![0u64; size];
                world.all_gather_into(&value, &mut all[..]);
                let _ = reply.send(all);
            }
            Request::Barrier(reply) => {
                world.barrier();
                let _ = reply.send(());
            }
            Request::AbortJob(grace, reply) => {
                let deadline = Instant::now() + grace;
                let met = poll(
                    |request| {
                        // SAFETY: `request` is a valid out-pointer for the new request; `world` is alive
                        // and this is the MPI thread.
                        unsafe { mpi::ffi::MPI_Ibarrier(world.as_raw(), request) }
                    },
                    "MPI_Ibarrier",
                    || aborting.load(Ordering::Relaxed) || Instant::now() >= deadline,
                );
                if !met {
                    abort(world);
                }
                let _ = reply.send(());
            }
        }
    }
}

/// Sleeps (rather than spins: the cores belong to the compute threads) until `deadline`;
/// `false` if `aborting` was set meanwhile.
fn hold_until(deadline: Instant, aborting: &AtomicBool) -> bool {
    loop {
        if aborting.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(ABORT_CHECK));
    }
}

/// How often a held all-reduce checks whether this rank is aborting.
const ABORT_CHECK: Duration = Duration::from_millis(10);

/// Ends every rank of the job; does not return.
fn abort(world: &SimpleCommunicator) -> ! {
    world.abort(1)
}

/// Requests that can be queued before a sender waits.
const REQUEST_QUEUE: usize = 1024;
