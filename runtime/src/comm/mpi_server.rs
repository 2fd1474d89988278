//! The communication thread's side: it initialises MPI, sets up the shared-memory window,
//! then serves the compute thread's requests in order until the channel closes, and finalises
//! MPI. Every MPI call of the process is made here (see `mpi_thread`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Threading;

use overlap_plan::Link;

use super::board::{self, Board};
use super::bucket::{GradBucket, Sharding};
use super::gathering::GatheredParams;
use super::in_flight::Reduced;
use super::last_words;
use super::mailbox::Reply;
use super::mode::Transport;
use super::mpi_calls::{self, all_reduce_in_place, gather_to_root, Gathered};
use super::narrow_mpi::NarrowMpi;
use super::parting::{self, Parting};
use super::shard_server::ShardServer;
use super::shared_memory::{SharedMemory, Unavailable};
use super::wire::Narrowing;

/// What the compute thread asks of the communication thread.
pub(super) enum Request {
    AllReduce(GradBucket, Reply<Reduced>),
    /// The all-gather of elements `elements` of bucket `bucket`'s updated shards, whose values
    /// an earlier reduce-scatter kept here (`Sharding::Sharded`).
    AllGather {
        bucket: usize,
        elements: std::ops::Range<usize>,
        reply: Reply<GatheredParams>,
    },
    /// The step's clip of sharded buckets, after their last reduce-scatter (`ShardServer::clip`).
    ClipShards,
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
    /// This rank failed: meets the other failed ranks at a barrier within the grace period, or
    /// aborts the job (saying the rank's `last_words`).
    AbortJob(Duration, Sender<()>),
}

/// What the thread tells `start` once MPI is up: rank, world size and the transport in use.
pub(super) type Started = std::result::Result<(usize, usize, Transport), String>;

/// The thread's body: initialises MPI, tells `ready` the outcome, serves `inbox` in order.
pub(super) fn serve(
    inbox: Receiver<Request>,
    ready: Sender<Started>,
    aborting: &AtomicBool,
    transport: Transport,
    board: Option<&'static Board>,
) {
    crate::fault::at_start_up("mpi-init");
    // Only this thread ever calls MPI, and it is the thread that initialises it: FUNNELED is
    // exactly the guarantee needed.
    let Some((universe, _level)) = mpi::initialize_with_threading(Threading::Funneled) else {
        let _ = ready.send(Err("MPI was already initialised in this process, and MPI starts once per process (not \
                                 again after a communicator is dropped): make one `Communicator` and keep it for the \
                                 process's life"
            .into()));
        return;
    };
    let world = universe.world();
    board.inspect(|b| b.reach(board::MPI_INITIALISED));
    crate::fault::at_start_up("shared-memory");
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    // Where ranks that failed meet before they end (`AbortJob`). On `world`, that barrier could
    // match a collective another rank waits in (a metric's sum, an all-reduce over MPI): MPI
    // would then report a truncated message instead of the failing rank's error.
    let failed_ranks = world.duplicate();
    // Sleeps between polls should last what they ask for, not the default 50 us of slack.
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only changes this thread's
    // timer slack; a failure leaves the default, which is merely coarser.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    // The compute thread's priority, not a lower one: besides summing, this thread runs the
    // updates of the parameters lent to its buckets, which the step waits for. At nice 10 it got
    // a tenth of a core shared with compute, and on a slow emulated link the chain of reductions
    // then outlasted the link (tower, 128 samples, 0.4 GB/s: 115.5 ms per step against 108.9 at
    // nice 0; mlp unchanged, 57.9 against 58.1).
    // Whether a rank sets up shared memory decides the collectives it runs next: ranks that chose
    // otherwise stop here, named, instead of waiting in a set-up the others skip.
    // Giving up leaves the request to MPI_Abort, as everywhere (`mpi_calls::poll`).
    let Some(chosen) = mpi_calls::all_gather_u64(&world, transport as u64, aborting) else { abort(&world) };
    if let Some(why) = other_transports(&chosen) {
        let _ = ready.send(Err(why));
        return;
    }
    // Collective: every rank takes the same branch.
    let shared = match transport {
        Transport::Mpi => None,
        Transport::Auto => SharedMemory::create(&world).ok(),
        Transport::SharedMemory => match SharedMemory::create(&world) {
            Ok(shared) => Some(shared),
            // One rank sums nothing, through shared memory or otherwise: as a job without mpirun.
            Err(Unavailable::OneRank) => None,
            Err(why) => {
                let _ = ready.send(Err(format!("`CommConfig::transport` shared-memory is impossible: {why}")));
                return;
            }
        },
    };
    let used = if shared.is_some() { Transport::SharedMemory } else { Transport::Mpi };
    if let Some(board) = board {
        board.reach(board::READY);
        // Every rank opened the board before initialising MPI, which it has finished.
        if rank == 0 {
            board.unlink();
        }
    }
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
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        serve_requests((&world, &failed_ranks), shared, inbox, aborting, board)
    }));
    // Likewise a rank that cannot meet the others in the teardown (`parting`) leaves it out.
    if !matches!(served, Ok(Parting::Together)) {
        std::mem::forget(failed_ranks);
        std::mem::forget(universe);
    }
}

/// Serves requests in order until the channel closes; gradients go through `shared` memory when
/// there is one, else through MPI; ranks that failed meet on `failed_ranks` alone. Then waits
/// for the others to go too (`parting`): alone, it leaves `shared` as it is.
fn serve_requests(
    (world, failed_ranks): (&SimpleCommunicator, &SimpleCommunicator),
    mut shared: Option<SharedMemory>,
    inbox: Receiver<Request>,
    aborting: &AtomicBool,
    board: Option<&Board>,
) -> Parting {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let mut link: Option<Link> = None;
    let mut all_reduces = 0u64;
    let mut narrow_mpi = NarrowMpi::default();
    let mut shards = ShardServer::default();
    // A collective some rank never joins ends in `abort` once this rank gives up (`aborting`).
    let done = |finished: bool| {
        if !finished {
            abort(world);
        }
    };
    // Replies may find their receiver gone (a handle dropped unwaited); that is not an error.
    for request in inbox {
        if request.is_collective() {
            board.inspect(|b| {
                b.enter_collective();
            });
        }
        match request {
            Request::AllReduce(mut bucket, reply) => {
                all_reduces += 1;
                crate::fault::at_all_reduce(rank, all_reduces);
                let started = Instant::now();
                // One rank sends nothing, so rounds nothing (`mpirun -n 1` comes here too).
                let narrowing = Narrowing::new(bucket.wire_format(), size).filter(|_| size > 1);
                let sharding = if size > 1 { bucket.sharding() } else { Sharding::Whole };
                let reduced = if sharding == Sharding::Whole {
                    let (data, lent) = bucket.data_and_lent();
                    match (&mut shared, narrowing) {
                        (Some(shared), None) => shared.all_reduce(data, lent, aborting),
                        (Some(shared), Some(narrowing)) => shared.all_reduce_narrow(data, lent, narrowing, aborting),
                        (None, Some(narrowing)) => narrow_mpi.all_reduce(world, data, lent, narrowing, aborting),
                        (None, None) => {
                            let done = all_reduce_in_place(world, data, aborting);
                            if done {
                                lent.update_and_clear(data);
                            }
                            done
                        }
                    }
                } else {
                    shards.reduce_scatter((world, &mut shared), &mut bucket, (narrowing, &mut narrow_mpi), aborting)
                };
                if !reduced {
                    abort(world);
                }
                // One rank's bucket is not sharded here: its wait point clips it.
                let awaits_clip = sharding == Sharding::Sharded && bucket.data_and_lent().1.awaits_clip();
                if let Some(link) = &link {
                    // The bytes that travel: half a bucket's for bf16 and fp16.
                    let bytes = bucket.len() * bucket.wire_format().bytes_per_value();
                    let hold = hold_for(match sharding {
                        Sharding::Whole => link.ring_all_reduce_seconds(bytes, size),
                        // The all-gather comes later, in the next forward.
                        Sharding::Sharded => link.ring_reduce_scatter_seconds(bytes, size),
                    });
                    if !hold_until(started.checked_add(hold), aborting) {
                        abort(world);
                    }
                }
                let mut reduced = Reduced { bucket, started, finished: Instant::now(), failure: None };
                // After `finished`: the all-reduce's time (the trace, the report, a written
                // profile) stays the transport's alone.
                if sharding == Sharding::Whole {
                    reduced.bucket.arrived();
                }
                if awaits_clip {
                    shards.hold_for_clip(reduced, reply);
                } else {
                    reply.send(reduced);
                }
            }
            Request::ClipShards => done(shards.clip(world, aborting)),
            Request::AllGather { bucket, elements, reply } => {
                let started = Instant::now();
                let bytes = elements.len() * std::mem::size_of::<f32>();
                let Some(values) = shards.all_gather((world, &mut shared), bucket, elements, aborting) else {
                    abort(world);
                };
                let hold = link.map_or(Duration::ZERO, |link| hold_for(link.ring_all_gather_seconds(bytes, size)));
                if !hold_until(started.checked_add(hold), aborting) {
                    abort(world);
                }
                reply.send(GatheredParams { values, started, finished: Instant::now() });
            }
            Request::EmulateLink(emulated) => link = emulated,
            Request::Flush(reply) => reply.send(()),
            Request::GatherU64(data, reply) => {
                let gathered = gather_to_root(world, &data, aborting);
                done(gathered.is_some());
                let _ = reply.send(gathered.unwrap_or_default());
            }
            Request::Broadcast(mut data, reply) => {
                done(mpi_calls::broadcast(world, &mut data, aborting));
                let _ = reply.send(data);
            }
            Request::BroadcastBytes(mut data, reply) => {
                done(mpi_calls::broadcast(world, &mut data, aborting));
                let _ = reply.send(data);
            }
            Request::SumF64(value, reply) => {
                let sum = mpi_calls::sum_f64(world, value, aborting);
                done(sum.is_some());
                let _ = reply.send(sum.unwrap_or_default());
            }
            Request::AllGatherU64(value, reply) => {
                let all = mpi_calls::all_gather_u64(world, value, aborting);
                done(all.is_some());
                let _ = reply.send(all.unwrap_or_default());
            }
            Request::Barrier(reply) => {
                done(mpi_calls::barrier(world, || aborting.load(Ordering::Relaxed)));
                let _ = reply.send(());
            }
            Request::AbortJob(grace, reply) => {
                // A grace period no instant can hold never ends (the flag still does).
                let deadline = Instant::now().checked_add(grace);
                let give_up = || aborting.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d);
                if !mpi_calls::barrier(failed_ranks, give_up) {
                    abort(world);
                }
                // The failed ranks met: nobody aborts, and each returns its error.
                last_words::take();
                let _ = reply.send(());
            }
        }
    }
    let parting = parting::part(board);
    if let Parting::Alone(why) = &parting {
        crate::process::console::err_line(why);
        std::mem::forget(shared);
    }
    parting
}

/// Why the ranks cannot sum gradients together, when some chose MPI's all-reduce and others
/// shared memory (`chosen`: each rank's `Transport` as a number).
fn other_transports(chosen: &[u64]) -> Option<String> {
    let uses_mpi = |t: u64| t == Transport::Mpi as u64;
    if chosen.iter().all(|&t| uses_mpi(t) == uses_mpi(chosen[0])) {
        return None;
    }
    let name = |t: u64| {
        [Transport::Auto, Transport::SharedMemory, Transport::Mpi]
            .into_iter()
            .find(|&k| k as u64 == t)
            .map_or("?", Transport::name)
    };
    let each: Vec<String> = chosen.iter().enumerate().map(|(rank, &t)| format!("rank {rank} {}", name(t))).collect();
    Some(format!(
        "the ranks chose other transports (`CommConfig::transport`): {}; every rank must sum gradients through MPI, \
         or every rank through shared memory",
        each.join(", ")
    ))
}

impl Request {
    /// Whether every rank makes this request at the same point (and the board counts it).
    fn is_collective(&self) -> bool {
        !matches!(self, Request::EmulateLink(_) | Request::Flush(_) | Request::AbortJob(..))
    }
}

/// The cost model's `seconds` as a hold: a time too long for a `Duration` (only a link no one
/// could build, which the `--link` parser refuses) saturates; a negative or NaN one is none.
fn hold_for(seconds: f64) -> Duration {
    match Duration::try_from_secs_f64(seconds) {
        Ok(hold) => hold,
        Err(_) if seconds > 0.0 => Duration::MAX,
        Err(_) => Duration::ZERO,
    }
}

/// Sleeps (rather than spins: the cores belong to the compute threads) until `deadline` (`None`:
/// one too far ahead for an instant, so until aborted); `false` if `aborting` was set meanwhile.
fn hold_until(deadline: Option<Instant>, aborting: &AtomicBool) -> bool {
    loop {
        if aborting.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        let left = match deadline {
            Some(deadline) if now >= deadline => return true,
            Some(deadline) => deadline - now,
            None => ABORT_CHECK,
        };
        std::thread::sleep(left.min(ABORT_CHECK));
    }
}

/// How often a held all-reduce checks whether this rank is aborting.
const ABORT_CHECK: Duration = Duration::from_millis(10);

/// Ends every rank of the job, after this rank's last words, if any; does not return.
fn abort(world: &SimpleCommunicator) -> ! {
    if let Some(why) = last_words::take() {
        crate::process::console::err_line(&why);
    }
    world.abort(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_that_chose_mpi_and_shared_memory_are_named() {
        let (auto, shared, mpi) = (Transport::Auto as u64, Transport::SharedMemory as u64, Transport::Mpi as u64);
        assert_eq!(other_transports(&[auto, shared, auto]), None, "both set up shared memory");
        assert_eq!(other_transports(&[mpi, mpi]), None);
        let why = other_transports(&[auto, mpi]).unwrap();
        assert!(why.contains("(`CommConfig::transport`): rank 0 auto, rank 1 mpi;"), "{why}");
    }

    #[test]
    fn holds_saturate_and_never_panic() {
        assert_eq!(hold_for(1e-3), Duration::from_millis(1));
        assert_eq!(hold_for(1e300), Duration::MAX);
        assert_eq!(hold_for(f64::INFINITY), Duration::MAX);
        assert_eq!(hold_for(f64::NAN), Duration::ZERO);
        assert_eq!(hold_for(-1.0), Duration::ZERO);
        // A deadline no instant can hold ends only when the rank aborts.
        let aborting = AtomicBool::new(true);
        assert!(!hold_until(Instant::now().checked_add(Duration::MAX), &aborting));
        assert!(hold_until(Some(Instant::now()), &AtomicBool::new(false)));
    }
}
