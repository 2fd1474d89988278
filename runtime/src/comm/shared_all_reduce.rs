//! The FP32 all-reduce through the node's shared segments (`shared_memory`): a bucket goes
//! through in chunks; each rank copies its chunk in, sums one part of it over all ranks, in rank
//! order, and copies the other parts' sums out, or updates the lent parameters from them where
//! they are.

use std::sync::atomic::AtomicBool;

use overlap_plan::WireFormat;

use super::chunk_shape::{Collective, Shape};
use super::lent::Lent;
use super::shared_memory::{blocks, part, sum_in_rank_order, Flag, SharedMemory, CHUNK, SLOTS};

impl SharedMemory {
    /// Sums `data` over all ranks, in place; or, when parameters are `lent` with it, updates
    /// them from the sums where they are, in the chunk slots, and clears `data`. Every
    /// rank must call it with the same length, in the same order (lending or not). `false` if
    /// `aborting` was set while it waited for another rank.
    pub(super) fn all_reduce(&mut self, data: &mut [f32], lent: &mut Lent, aborting: &AtomicBool) -> bool {
        let me = self.segments[self.rank];
        let ranks = self.segments.len();
        let fused = !lent.is_empty();
        let shape = Shape { what: Collective::AllReduce(WireFormat::Fp32), len: data.len() };
        for (c, piece) in data.chunks_mut(CHUNK).enumerate() {
            let at = c * CHUNK;
            let (s, slot) = self.next_chunk();
            let mine = part(piece.len(), ranks, self.rank);
            // The others are done reading this slot's previous chunk.
            if !self.wait_all(Flag::Consumed, s.saturating_sub(SLOTS as u64), aborting) {
                return false;
            }
            // SAFETY (all slot accesses below): chunk slots of other ranks are only read, and
            // only between their `Posted >= s` and our `Consumed = s`, during which their owner
            // writes nothing but its own part (after its `Posted`, before its `Reduced`), which
            // we read only after its `Reduced >= s`. Our own slot is written outside our part
            // only after every rank's `Consumed >= s - SLOTS` (nobody reads it then), and in our
            // part only before our `Reduced = s`, when nobody reads that part; after it, we only
            // read our part, as the others do. Release stores and acquire loads of the flags
            // order these accesses across processes. Every range is within the chunk, so inside
            // the mapped segments.
            // Only the other ranks' parts are copied in: our own part is summed from `piece`.
            // A lent bucket is read here for the last time: each block is cleared for the next
            // step right after it is copied, while it is in L1.
            for range in [0..mine.start, mine.end..piece.len()] {
                for block in blocks(range) {
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            piece[block.clone()].as_ptr(),
                            me.slot(slot, block.clone()),
                            block.len(),
                        )
                    };
                    if fused {
                        piece[block].fill(0.0);
                    }
                }
            }
            self.post(s, slot, shape);
            if !self.wait_posted(s, slot, shape, aborting) {
                return false;
            }
            let sum = &mut piece[mine.clone()];
            // SAFETY: see above; `mine` is within the chunk, and this rank's slot is memory no
            // slice of `piece` covers.
            let published = unsafe { std::slice::from_raw_parts_mut(me.slot(slot, mine.clone()), mine.len()) };
            // The sum goes to the slot, block by block while it is in L1; then, unless the lent
            // parameters read it there, back into our part of the bucket. A lent bucket's part is
            // read here for the last time, and cleared.
            for block in blocks(0..sum.len()) {
                let own = &sum[block.clone()];
                let value = |r: usize| {
                    if r == self.rank {
                        own
                    } else {
                        let at = mine.start + block.start..mine.start + block.end;
                        // SAFETY: see above.
                        unsafe { std::slice::from_raw_parts(self.segments[r].slot(slot, at.clone()), at.len()) }
                    }
                };
                sum_in_rank_order(ranks, value, &mut published[block.clone()]);
                if fused {
                    sum[block].fill(0.0);
                } else {
                    sum[block.clone()].copy_from_slice(&published[block]);
                }
            }
            self.publish(Flag::Reduced, s);
            if fused {
                // Our part's sums stay in our slot, which nobody writes before our `Consumed`;
                // the others read them now, so they are read here through a shared slice.
                // SAFETY: see above.
                let summed = unsafe { std::slice::from_raw_parts(me.slot(slot, mine.clone()), mine.len()) };
                lent.update(at + mine.start..at + mine.end, summed);
            }
            if !self.wait_all(Flag::Reduced, s, aborting) {
                return false;
            }
            for (peer, segment) in self.segments.iter().enumerate().filter(|&(peer, _)| peer != self.rank) {
                let theirs = part(piece.len(), ranks, peer);
                // SAFETY: see above.
                let summed = unsafe { std::slice::from_raw_parts(segment.slot(slot, theirs.clone()), theirs.len()) };
                if fused {
                    lent.update(at + theirs.start..at + theirs.end, summed);
                } else {
                    piece[theirs].copy_from_slice(summed);
                }
            }
            self.publish(Flag::Consumed, s);
        }
        true
    }
}
