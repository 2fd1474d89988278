//! A bucket reduce-scattered and all-gathered through shared memory, for sharded optimizer state
//! (ZeRO-1): each rank sums only the elements of its own shard of the bucket (`shard_of`),
//! updates the lent parameters there with the state it keeps for them alone, and the updated
//! shards go back to every rank's parameters.
//!
//! Both halves run chunk by chunk through the same slots and flags as the all-reduce
//! (`shared_memory`). Reduce-scatter: every rank copies into its slot the elements of the chunk
//! that other ranks own; the owner of each element adds every rank's value in rank order, the
//! floats the all-reduce gives (`sum_in_rank_order`), into its own slot, where its update reads
//! them. All-gather: each rank copies its updated values into its slot, and every rank copies
//! the others' into its parameters. The bucket comes back cleared for the next step.

use std::ops::Range;
use std::sync::atomic::AtomicBool;

use overlap_plan::shard_of;

use super::lent::{Lent, ParamValues};
use super::shared_memory::{blocks, sum_in_rank_order, Flag, SharedMemory, CHUNK, SLOTS};

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
    pub(super) fn reduce_scatter(&mut self, data: &mut [f32], lent: &mut Lent, aborting: &AtomicBool) -> bool {
        let ranks = self.segments.len();
        let shard = &shard_of(data.len(), ranks, self.rank);
        let me = self.segments[self.rank];
        for (c, piece) in data.chunks_mut(CHUNK).enumerate() {
            let at = c * CHUNK;
            let (s, slot) = self.next_chunk();
            let mine = within(shard, at, piece.len());
            if !self.wait_all(Flag::Consumed, s.saturating_sub(SLOTS as u64), aborting) {
                return false;
            }
            // SAFETY (all slot accesses below): another rank's slot is read only between its
            // `Posted >= s` and our `Consumed = s`; it writes nothing to it in that time (it
            // writes its slot again only after every rank's `Consumed >= s`, SLOTS chunks
            // later). Our own slot is written outside our shard only before our `Posted = s`,
            // after every rank's `Consumed >= s - SLOTS` (nobody reads it then), and inside our
            // shard, which nobody else reads, only by us. Release stores and acquire loads of the
            // flags order these accesses across processes. Every range is within the chunk, so
            // inside the mapped segments.
            // The elements others own go to our slot, and are cleared for the next step.
            for range in [0..mine.start, mine.end..piece.len()] {
                for block in blocks(range) {
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            piece[block.clone()].as_ptr(),
                            me.slot(slot, block.clone()),
                            block.len(),
                        )
                    };
                    piece[block].fill(0.0);
                }
            }
            self.publish(Flag::Posted, s);
            if !self.wait_all(Flag::Posted, s, aborting) {
                return false;
            }
            for block in blocks(mine.clone()) {
                // SAFETY: see above; our slot's `block`, in our shard, is memory no slice of
                // `piece` covers.
                let sums = unsafe { std::slice::from_raw_parts_mut(me.slot(slot, block.clone()), block.len()) };
                let own = &piece[block.clone()];
                let value = |r: usize| {
                    if r == self.rank {
                        own
                    } else {
                        // SAFETY: see above.
                        unsafe { std::slice::from_raw_parts(self.segments[r].slot(slot, block.clone()), block.len()) }
                    }
                };
                sum_in_rank_order(ranks, value, sums);
                lent.update(at + block.start..at + block.end, sums);
                piece[block].fill(0.0);
            }
            self.publish(Flag::Consumed, s);
        }
        true
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
