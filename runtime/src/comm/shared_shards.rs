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

use std::ops::Range;
use std::sync::atomic::AtomicBool;

use overlap_plan::shard_of;

use super::lent::{Lent, ParamValues};
use super::shared_memory::{Flag, SharedMemory, CHUNK, SLOTS};

impl SharedMemory {
    /// Sums this rank's shard of `data` over all ranks, updates the `lent` parameters there, and
    /// gives every rank's parameters the others' updated shards; clears `data`. Every rank must
    /// call it with the same length, in the same order. `false` if `aborting` was set while it
    /// waited for another rank.
    pub(super) fn reduce_scatter_and_gather(
        &mut self,
        data: &mut [f32],
        lent: &mut Lent,
        aborting: &AtomicBool,
    ) -> bool {
        self.reduce_scatter(data, lent, aborting) && self.all_gather(data.len(), lent.values_mut(), aborting)
    }

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
            let mine = within(&shard_of(len, ranks, self.rank), at, chunk_len);
            // SAFETY: as in `reduce_scatter`: our slot is written only after every rank's
            // `Consumed >= s - SLOTS` and before our `Posted = s`; the others' are read only
            // between their `Posted >= s` and our `Consumed = s`, inside the chunk.
            let out = unsafe { std::slice::from_raw_parts_mut(me.slot(slot, mine.clone()), mine.len()) };
            values.read_values(at + mine.start..at + mine.end, out);
            self.publish(Flag::Posted, s);
            if !self.wait_all(Flag::Posted, s, aborting) {
                return false;
            }
            for peer in (0..ranks).filter(|&peer| peer != self.rank) {
                let theirs = within(&shard_of(len, ranks, peer), at, chunk_len);
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

    /// The next chunk's sequence number and the slot it goes through.
    fn next_chunk(&mut self) -> (u64, usize) {
        self.sequence += 1;
        (self.sequence, (self.sequence % SLOTS as u64) as usize)
    }
}

/// The part of `shard` inside the chunk at `at..at + len`, as positions in the chunk.
fn within(shard: &Range<usize>, at: usize, len: usize) -> Range<usize> {
    let start = shard.start.clamp(at, at + len);
    let end = shard.end.clamp(start, at + len);
    start - at..end - at
}

#[cfg(test)]
mod tests {
    use super::within;

    #[test]
    fn a_shard_seen_from_a_chunk() {
        assert!(within(&(10..20), 0, 8).is_empty());
        assert_eq!(within(&(10..20), 8, 8), 2..8);
        assert_eq!(within(&(10..20), 16, 8), 0..4);
        assert!(within(&(10..20), 24, 8).is_empty());
        assert_eq!(within(&(0..40), 8, 8), 0..8);
    }
}
