//! The shared-memory all-reduce with narrow (bf16 / fp16) slots: the same chunks, flags and
//! parts as the FP32 one (`shared_all_reduce`), with half the bytes per value in the window.
//!
//! Each FP32 chunk slot holds two narrow areas of `CHUNK` values: `Sent`, where a rank leaves its
//! chunk rounded to the narrow type (all of it but its own part, which nobody else sums), and
//! `Sums`, where it leaves its part's sums, rounded once. The owner of a part adds the ranks'
//! values in FP32 in rank order, its own unrounded (`Narrowing::sum_once`); every rank, the owner
//! included, then widens every part's narrow sums: all ranks end bit-identical, and each value is
//! rounded at most twice, once to be sent and once as a sum (see `wire`).

use std::ops::Range;
use std::sync::atomic::AtomicBool;

use super::chunk_shape::{Collective, Shape};
use super::lent::Lent;
use super::shared_memory::{part, Flag, Segment, SharedMemory, CHUNK, SLOTS};
use super::wire::{Narrowing, BLOCK};

/// The two narrow areas of a chunk slot.
#[derive(Clone, Copy)]
enum Area {
    /// A rank's values of the chunk, narrowed to be summed by the parts' owners.
    Sent = 0,
    /// The owner's part of the chunk, summed and narrowed.
    Sums = 1,
}

impl Segment {
    /// Values `range` of area `area` of chunk slot `slot`.
    fn narrow(self, slot: usize, area: Area, range: Range<usize>) -> *mut u16 {
        debug_assert!(range.end <= CHUNK);
        // SAFETY: an FP32 slot has room for 2 · CHUNK u16 values, so both areas (each CHUNK
        // long, the second starting at CHUNK) lie inside it, and `range` within an area.
        unsafe { self.slot(slot, 0..0).cast::<u16>().add(area as usize * CHUNK + range.start) }
    }
}

impl SharedMemory {
    /// `all_reduce` (see there for what `lent` changes and what `false` means), with the values
    /// on the wire in `narrowing`'s format and the sums in FP32.
    pub(super) fn all_reduce_narrow(
        &mut self,
        data: &mut [f32],
        lent: &mut Lent,
        narrowing: Narrowing,
        aborting: &AtomicBool,
    ) -> bool {
        let (me, ranks) = (self.rank, self.segments.len());
        let mine_segment = self.segments[me];
        let fused = !lent.is_empty();
        let mut widened = [0.0f32; BLOCK];
        let shape = Shape { what: Collective::AllReduce(narrowing.format()), len: data.len() };
        for (c, piece) in data.chunks_mut(CHUNK).enumerate() {
            let at = c * CHUNK;
            let (s, slot) = self.next_chunk();
            let mine = part(piece.len(), ranks, me);
            // The others are done reading this slot's previous chunk (its sent values, then sums).
            if !self.wait_all(Flag::Consumed, s.saturating_sub(SLOTS as u64), aborting) {
                return false;
            }
            // SAFETY (all area accesses below): as in `all_reduce`, with the areas in place of the
            // slot: our `Sent` area is written only here, after every rank's `Consumed` of the
            // slot's previous chunk, and read by the others only between our `Posted` and their
            // `Reduced`; our `Sums` area is written only between everyone's `Posted` and our
            // `Reduced`, and read by the others after our `Reduced` and before their `Consumed`.
            // Other ranks' areas are only read, inside those windows. Every range lies within the
            // chunk, so inside the mapped segments, and no slice of `piece` covers a segment.
            for range in [0..mine.start, mine.end..piece.len()] {
                for block in blocks(range) {
                    // SAFETY: see above.
                    let sent = unsafe {
                        std::slice::from_raw_parts_mut(
                            mine_segment.narrow(slot, Area::Sent, block.clone()),
                            block.len(),
                        )
                    };
                    narrowing.narrow(&piece[block.clone()], sent);
                    if fused {
                        piece[block].fill(0.0);
                    }
                }
            }
            self.post(s, slot, shape);
            if !self.wait_posted(s, slot, shape, aborting) {
                return false;
            }
            let segments = &self.segments;
            // SAFETY: see above.
            let theirs = |rank: usize| unsafe {
                std::slice::from_raw_parts(segments[rank].narrow(slot, Area::Sent, mine.clone()), mine.len())
            };
            // SAFETY: see above.
            let sums = unsafe {
                std::slice::from_raw_parts_mut(mine_segment.narrow(slot, Area::Sums, mine.clone()), mine.len())
            };
            narrowing.sum_once(ranks, me, &piece[mine.clone()], theirs, sums);
            if fused {
                piece[mine.clone()].fill(0.0);
            }
            self.publish(Flag::Reduced, s);
            if !self.wait_all(Flag::Reduced, s, aborting) {
                return false;
            }
            for (rank, segment) in self.segments.iter().enumerate() {
                for block in blocks(part(piece.len(), ranks, rank)) {
                    // SAFETY: see above.
                    let sums = unsafe {
                        std::slice::from_raw_parts(segment.narrow(slot, Area::Sums, block.clone()), block.len())
                    };
                    if fused {
                        let widened = &mut widened[..block.len()];
                        narrowing.widen(sums, widened);
                        lent.update(at + block.start..at + block.end, widened);
                    } else {
                        narrowing.widen(sums, &mut piece[block]);
                    }
                }
            }
            self.publish(Flag::Consumed, s);
        }
        true
    }
}

/// `range` in pieces of `BLOCK` values, the last one shorter: what one stack buffer holds.
fn blocks(range: Range<usize>) -> impl Iterator<Item = Range<usize>> {
    range.clone().step_by(BLOCK).map(move |start| start..(start + BLOCK).min(range.end))
}
