//! The communication thread's side of sharded buckets (ZeRO-1): each bucket's reduce-scatter
//! and the update of this rank's shard, the updated values kept for its all-gather in the next
//! forward, and, when the run clips by the global gradient norm, the scalar all-reduce of the
//! shards' squares that the updates wait for.
//!
//! Clipping needs every bucket's sums before any update, and with sharded state each rank holds
//! only its shards' sums. So a clipping step's reduce-scatters keep their sums (`Lent::await_clip`)
//! and their buckets here; after the last one the compute thread asks for the clip
//! (`Request::ClipShards`), which sums every rank's part of the squared norm, updates each
//! shard with the clipping factor, and keeps its values for the all-gather. The
//! reduce-scatters still overlap backward; what clipping costs is the overlap of the updates
//! with later buckets' sums, as it does unsharded.

use std::ops::Range;
use std::sync::atomic::AtomicBool;

use mpi::topology::SimpleCommunicator;

use super::bucket::GradBucket;
use super::gathering::Gathers;
use super::in_flight::Reduced;
use super::lent::ParamValues;
use super::mailbox::Reply;
use super::mpi_calls;
use super::mpi_shards::MpiShards;
use super::narrow_mpi::NarrowMpi;
use super::shared_memory::SharedMemory;
use super::wire::Narrowing;

/// Bits of a non-finite sum's key for its element in the bucket (buckets are far smaller than
/// 2^40 elements); the bucket's index is above them.
const ELEMENT_BITS: u32 = 40;
/// The key of no non-finite sum: after every other.
const NONE_FOUND: u64 = u64::MAX;

/// What the communication thread keeps of sharded buckets between requests.
#[derive(Default)]
pub(super) struct ShardServer {
    mpi: MpiShards,
    gathers: Gathers,
    /// Reduce-scattered buckets whose updates wait for the step's clip, in launch order, with
    /// the replies that return them.
    awaiting_clip: Vec<(Reduced, Reply<Reduced>)>,
}

impl ShardServer {
    /// Reduce-scatters `bucket` and updates this rank's shard of its lent parameters, whose
    /// values it keeps for the all-gather the step launches for the next forward. A bucket that
    /// awaits the clip only keeps its sums (`hold_for_clip` takes it next). `false` if
    /// `aborting` was set while it waited for another rank.
    ///
    /// With `narrowing` (bf16 or fp16 on the wire) the update reads the FP32 sums of this rank's
    /// shard, rounded once, as the narrow all-reduce rounds them: the same bits as unsharded. MPI
    /// reduce-scatters the narrow values (`NarrowMpi::reduce_scatter`); shared memory runs the
    /// narrow all-reduce's passes, whose other sums the lent update skips.
    pub(super) fn reduce_scatter(
        &mut self,
        (world, shared): (&SimpleCommunicator, &mut Option<SharedMemory>),
        bucket: &mut GradBucket,
        (narrowing, narrow_mpi): (Option<Narrowing>, &mut NarrowMpi),
        aborting: &AtomicBool,
    ) -> bool {
        let index = bucket.index();
        let (data, lent) = bucket.data_and_lent();
        let reduced = match (shared.as_mut(), narrowing) {
            (Some(shared), None) => shared.reduce_scatter(data, lent, aborting),
            (None, None) => self.mpi.reduce_scatter(world, data, lent, aborting),
            (Some(shared), Some(narrowing)) => shared.all_reduce_narrow(data, lent, narrowing, aborting),
            (None, Some(narrowing)) => narrow_mpi.reduce_scatter(world, data, lent, narrowing, aborting),
        };
        if reduced && !lent.awaits_clip() {
            self.gathers.keep(index, data.len(), lent);
        }
        reduced
    }

    /// The all-gather of elements `elements` of bucket `bucket`'s updated shards, whose values
    /// its reduce-scatter kept; `None` if `aborting` was set while it waited for another rank.
    pub(super) fn all_gather(
        &mut self,
        (world, shared): (&SimpleCommunicator, &mut Option<SharedMemory>),
        bucket: usize,
        elements: Range<usize>,
        aborting: &AtomicBool,
    ) -> Option<ParamValues> {
        let (numel, mut values) = self.gathers.take(bucket, elements.clone());
        let gathered = match shared {
            Some(shared) => shared.all_gather(numel, elements, &mut values, aborting),
            None => {
                let buffer = self.gathers.buffer(elements.len());
                self.mpi.all_gather(world, (buffer, numel), elements, &mut values, aborting)
            }
        };
        gathered.then_some(values)
    }

    /// Keeps a reduce-scattered bucket that awaits the clip, and the reply that returns it.
    pub(super) fn hold_for_clip(&mut self, reduced: Reduced, reply: Reply<Reduced>) {
        self.awaiting_clip.push((reduced, reply));
    }

    /// The step's clip and check: sums every rank's squares of its shards' sums (one scalar
    /// all-reduce), updates each held bucket's shard with the clipping factor, keeps its values
    /// for the all-gather, and returns the buckets to the compute thread, which reads the norm
    /// from them (`GradBucket::clipped_norm`). With the finiteness check, a non-finite norm (some
    /// sum is) updates nothing: the ranks agree on the first non-finite sum (one all-gather of
    /// its place, one of its value), which the wait point of its bucket reports. `false` if
    /// `aborting` was set while it waited for another rank.
    pub(super) fn clip(&mut self, world: &SimpleCommunicator, aborting: &AtomicBool) -> bool {
        let mine: f64 =
            self.awaiting_clip.iter_mut().map(|(r, _)| r.bucket.data_and_lent().1.stashed_sum_of_squares()).sum();
        let Some(sum_of_squares) = mpi_calls::sum_f64(world, mine, aborting) else { return false };
        let checks = self.awaiting_clip.first_mut().is_some_and(|(r, _)| r.bucket.data_and_lent().1.checks_finite());
        let found = if checks && !sum_of_squares.is_finite() {
            let Some((key, value)) = self.first_non_finite(world, aborting) else { return false };
            // The squares of f32 sums cannot overflow their f64 sum: a non-finite norm has a
            // non-finite sum somewhere, so some rank's key is not `NONE_FOUND`.
            (key != NONE_FOUND).then_some((
                (key >> ELEMENT_BITS) as usize,
                (key & ((1 << ELEMENT_BITS) - 1)) as usize,
                value,
            ))
        } else {
            None
        };
        for (mut reduced, reply) in self.awaiting_clip.drain(..) {
            let index = reduced.bucket.index();
            let (data, lent) = reduced.bucket.data_and_lent();
            match found {
                Some(found) => lent.refuse_non_finite(found),
                None => lent.apply_clipped(sum_of_squares),
            }
            self.gathers.keep(index, data.len(), lent);
            reply.send(reduced);
        }
        true
    }

    /// The first non-finite sum of the held buckets over every rank, in launch order: its key
    /// (bucket, element) and value; `NONE_FOUND` if no rank has one. `None` if `aborting` was set
    /// while it waited for another rank.
    fn first_non_finite(&mut self, world: &SimpleCommunicator, aborting: &AtomicBool) -> Option<(u64, f32)> {
        let mine = self.awaiting_clip.iter_mut().find_map(|(r, _)| {
            let index = r.bucket.index();
            r.bucket.data_and_lent().1.first_non_finite().map(|(at, value)| (index, at, value))
        });
        // (bucket, element) as one key that orders them; none found sorts last.
        let key = mine.map_or(NONE_FOUND, |(bucket, at, _)| ((bucket as u64) << ELEMENT_BITS) | at as u64);
        let keys = mpi_calls::all_gather_u64(world, key, aborting)?;
        let values = mpi_calls::all_gather_u64(world, mine.map_or(0, |(_, _, v)| u64::from(v.to_bits())), aborting)?;
        let (rank, &first) = keys.iter().enumerate().min_by_key(|&(_, k)| *k)?;
        Some((first, f32::from_bits(values[rank] as u32)))
    }
}
