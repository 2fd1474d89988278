//! A bucket reduce-scattered and all-gathered through shared memory, for sharded optimizer state
//! (ZeRO-1): each rank sums only the elements of its own shard of the bucket (`shard_of`),
//! updates the lent parameters there with the state it keeps for them alone, and the updated
//! shards go back to every rank's parameters.
//!
//! Both go in rounds through the same slots and flags as the all-reduce (`shared_memory`). A
//! round's slot holds one piece of every rank's shard, at the same place in every rank's slot
//! (rank r's piece at `r · piece_len`), so that all ranks work at once, each on its own shard.
//! Reduce-scatter: each rank copies every other rank's piece of its gradients into its slot; each
//! sums its own piece over the ranks' slots, in rank order (`sum_in_rank_order`, the all-reduce's
//! floats), and updates its parameters there. All-gather: each rank copies its piece of the
//! updated values into its slot, and every rank copies the others' into its parameters. (Summing
//! the all-reduce's chunks instead, spread over the ranks, left each rank updating half of the
//! chunks while the others waited, and the reduce-scatter took longer than the all-reduce.)

use std::ops::Range;
use std::sync::atomic::AtomicBool;

use overlap_plan::{round_piece, shard_of, shard_within};

use super::chunk_shape::{Collective, Shape};
use super::lent::{Lent, ParamValues};
use super::shared_memory::{blocks, sum_in_rank_order, Flag, SharedMemory, CHUNK, PART_ALIGN, SLOTS};

impl SharedMemory {
    /// Reduce-scatter and update: the sums of this rank's shard of `data` go to the `lent`
    /// parameters there; `data` is cleared. `false` if `aborting` was set while it waited for
    /// another rank.
    pub(super) fn reduce_scatter(&mut self, data: &mut [f32], lent: &mut Lent, aborting: &AtomicBool) -> bool {
        let (ranks, me, len) = (self.segments.len(), self.segments[self.rank], data.len());
        let piece_len = piece_len(ranks);
        for round in 0..rounds(len, ranks) {
            let (s, slot) = self.next_chunk();
            if !self.wait_all(Flag::Consumed, s.saturating_sub(SLOTS as u64), aborting) {
                return false;
            }
            // SAFETY (all slot accesses below): a rank writes only its own slot: the others'
            // pieces after every rank's `Consumed >= s - SLOTS` (nobody reads the slot then), its
            // own piece's sums after its `Posted = s`, in an area no other rank reads. It reads
            // another rank's slot only in its own piece's area, between that rank's `Posted >= s`
            // and its own `Consumed = s`. Release stores and acquire loads of the flags order
            // these accesses across processes. Every area lies within the slot (`ranks ·
            // piece_len <= CHUNK`), so inside the mapped segments.
            for owner in (0..ranks).filter(|&r| r != self.rank) {
                let at = shard_piece(len, ranks, owner, round);
                // The gradients are read here for the last time: each block is cleared for the
                // next step right after it is copied, while it is in L1.
                for block in blocks(0..at.len()) {
                    let from = at.start + block.start..at.start + block.end;
                    let to = owner * piece_len + block.start..owner * piece_len + block.end;
                    unsafe {
                        std::ptr::copy_nonoverlapping(data[from.clone()].as_ptr(), me.slot(slot, to), block.len())
                    };
                    data[from].fill(0.0);
                }
            }
            let shape = Shape { what: Collective::ReduceScatter, len };
            self.post(s, slot, shape);
            if !self.wait_posted(s, slot, shape, aborting) {
                return false;
            }
            let (at, base) = (shard_piece(len, ranks, self.rank, round), self.rank * piece_len);
            // SAFETY: see above; our piece's area of our own slot, which no slice of `data` covers.
            let sums = unsafe { std::slice::from_raw_parts_mut(me.slot(slot, base..base + at.len()), at.len()) };
            for block in blocks(0..at.len()) {
                let own = &data[at.start + block.start..at.start + block.end];
                let value = |r: usize| {
                    if r == self.rank {
                        own
                    } else {
                        let area = base + block.start..base + block.end;
                        // SAFETY: see above.
                        unsafe { std::slice::from_raw_parts(self.segments[r].slot(slot, area), block.len()) }
                    }
                };
                sum_in_rank_order(ranks, value, &mut sums[block.clone()]);
            }
            data[at.clone()].fill(0.0);
            // Done reading the others' slots; the sums stay in ours, which only we write.
            self.publish(Flag::Consumed, s);
            lent.update(at, sums);
        }
        true
    }

    /// All-gather of elements `elements` of every rank's updated shard of a bucket of `len` into
    /// the parameters' `values`. `false` if `aborting` was set while it waited for another rank.
    pub(super) fn all_gather(
        &mut self,
        len: usize,
        elements: Range<usize>,
        values: &mut ParamValues,
        aborting: &AtomicBool,
    ) -> bool {
        let (ranks, me) = (self.segments.len(), self.segments[self.rank]);
        let piece_len = piece_len(ranks);
        let within = |r: usize| shard_within(len, ranks, r, &elements);
        let rounds = (0..ranks).map(|r| within(r).len().div_ceil(piece_len)).max().unwrap_or(0);
        for round in 0..rounds {
            let (s, slot) = self.next_chunk();
            if !self.wait_all(Flag::Consumed, s.saturating_sub(SLOTS as u64), aborting) {
                return false;
            }
            // SAFETY (all slot accesses below): our slot is written only after every rank's
            // `Consumed >= s - SLOTS` (nobody reads it then) and before our `Posted = s`; another
            // rank's slot is read only between its `Posted >= s` and our `Consumed = s`, during
            // which its owner does not write it. Release stores and acquire loads of the flags
            // order these accesses across processes. Every area lies within the slot.
            let (mine, base) = (round_piece(within(self.rank), round, piece_len), self.rank * piece_len);
            let out = unsafe { std::slice::from_raw_parts_mut(me.slot(slot, base..base + mine.len()), mine.len()) };
            values.read_values(mine, out);
            let shape = Shape { what: Collective::AllGather, len };
            self.post(s, slot, shape);
            if !self.wait_posted(s, slot, shape, aborting) {
                return false;
            }
            for peer in (0..ranks).filter(|&peer| peer != self.rank) {
                let (theirs, base) = (round_piece(within(peer), round, piece_len), peer * piece_len);
                // SAFETY: see above.
                let updated = unsafe {
                    std::slice::from_raw_parts(self.segments[peer].slot(slot, base..base + theirs.len()), theirs.len())
                };
                values.write_values(theirs, updated);
            }
            self.publish(Flag::Consumed, s);
        }
        true
    }
}

/// The elements of each rank's shard a round carries: as many as `ranks` pieces fit in a slot,
/// each starting on a cache line.
fn piece_len(ranks: usize) -> usize {
    CHUNK / ranks / PART_ALIGN * PART_ALIGN
}

/// The rounds a bucket of `len` takes: enough for the largest shard (the first).
fn rounds(len: usize, ranks: usize) -> usize {
    shard_of(len, ranks, 0).len().div_ceil(piece_len(ranks))
}

/// Round `round`'s piece of `rank`'s shard of a bucket of `len`.
fn shard_piece(len: usize, ranks: usize, rank: usize, round: usize) -> Range<usize> {
    round_piece(shard_of(len, ranks, rank), round, piece_len(ranks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_cover_every_shard_in_pieces_that_fit_a_slot() {
        for len in [0, 1, 5, 1000, CHUNK - 3, CHUNK * 3 + 7] {
            for ranks in 1..=9 {
                assert!(ranks * piece_len(ranks) <= CHUNK && piece_len(ranks).is_multiple_of(PART_ALIGN));
                for rank in 0..ranks {
                    let shard = shard_of(len, ranks, rank);
                    let mut next = shard.start;
                    for round in 0..rounds(len, ranks) {
                        let p = shard_piece(len, ranks, rank, round);
                        assert_eq!(p.start, next, "len {len}, {ranks} ranks, rank {rank}, round {round}");
                        next = p.end;
                    }
                    assert_eq!(next, shard.end, "len {len}, {ranks} ranks, rank {rank}");
                }
            }
        }
    }
}
