//! A bucket reduce-scattered and all-gathered through shared memory, for sharded optimizer state
//! (ZeRO-1): each rank sums only the elements of its own shard of the bucket (`shard_of`),
//! updates the lent parameters there with the state it keeps for them alone, and the updated
//! shards go back to every rank's parameters.
//!
//! Both halves run chunk by chunk through the same slots and flags as the all-reduce
//! (`shared_memory`). Reduce-scatter: the lent all-reduce's passes, every rank summing a part of
//! each chunk in rank order (`sum_in_rank_order`), each reading the sums of its own shard alone
//! for its update. All-gather: each rank copies its updated values into its slot, and every rank
//! copies the others' into its parameters. The bucket comes back cleared for the next step.

use std::sync::atomic::AtomicBool;

use overlap_plan::{owned_part, shard_of};

use super::lent::{Lent, ParamValues};
use super::shared_memory::{Flag, SharedMemory, CHUNK, SLOTS};

impl SharedMemory {
    /// Reduce-scatter and update: the sums of this rank's shard of `data` go to the lent
    /// parameters there; `data` is cleared.
    ///
    /// The lent all-reduce's passes (`SharedMemory::all_reduce`), whose summing is spread over
    /// every rank chunk by chunk, with the sums read only where the lent state covers them
    /// (`Lent::update` skips the rest): this rank's shard. Summing each chunk at its owner alone
    /// kept the others idle and made the step 10% slower on 2 ranks.
    pub(super) fn reduce_scatter(&mut self, data: &mut [f32], lent: &mut Lent, aborting: &AtomicBool) -> bool {
        self.all_reduce(data, lent, aborting)
    }

    /// All-gather of every rank's updated shard of a bucket of `len` into the parameters'
    /// `values`.
    pub(super) fn all_gather(&mut self, len: usize, values: &mut ParamValues, aborting: &AtomicBool) -> bool {
        let (ranks, me) = (self.segments.len(), self.segments[self.rank]);
        for at in (0..len).step_by(CHUNK) {
            let chunk_len = CHUNK.min(len - at);
            let (s, slot) = self.next_chunk();
            if !self.wait_all(Flag::Consumed, s.saturating_sub(SLOTS as u64), aborting) {
                return false;
            }
            // This rank's shard and each peer's, as positions in the chunk.
            let mine = owned_part(at, chunk_len, &shard_of(len, ranks, self.rank));
            // SAFETY (all slot accesses below): our slot is written only after every rank's
            // `Consumed >= s - SLOTS` (nobody reads it then) and before our `Posted = s`; another
            // rank's slot is read only between its `Posted >= s` and our `Consumed = s`, during
            // which its owner does not write it. Release stores and acquire loads of the flags
            // order these accesses across processes. Every range is within the chunk, so inside
            // the mapped segments.
            let out = unsafe { std::slice::from_raw_parts_mut(me.slot(slot, mine.clone()), mine.len()) };
            values.read_values(at + mine.start..at + mine.end, out);
            self.publish(Flag::Posted, s);
            if !self.wait_all(Flag::Posted, s, aborting) {
                return false;
            }
            for peer in (0..ranks).filter(|&peer| peer != self.rank) {
                let theirs = owned_part(at, chunk_len, &shard_of(len, ranks, peer));
                if !theirs.is_empty() {
                    // SAFETY: see above.
                    let updated = unsafe {
                        std::slice::from_raw_parts(self.segments[peer].slot(slot, theirs.clone()), theirs.len())
                    };
                    values.write_values(at + theirs.start..at + theirs.end, updated);
                }
            }
            self.publish(Flag::Consumed, s);
        }
        true
    }
}
