//! What a chunk in shared memory belongs to, published beside it: ranks that launch different
//! collectives, or buckets of different lengths (possible through the public `Communicator`
//! calls; the `Trainer` compares schedules first), stop the job saying so, instead of summing
//! unrelated data, which the shared-memory protocol would otherwise do by pairing whatever chunks
//! come next. (Only this transport checks: MPI's collectives over such a mismatch are erroneous,
//! and may fail with a truncated message or hang.) An all-gather's word holds its bucket's
//! length, not the range it gathers.

use std::sync::atomic::{AtomicBool, Ordering};

use overlap_plan::WireFormat;

use super::last_words;
use super::shared_memory::{Flag, SharedMemory};

/// The collectives that go through the chunk slots.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Collective {
    /// An all-reduce whose values travel in this format.
    AllReduce(WireFormat),
    /// A sharded bucket's reduce-scatter.
    ReduceScatter,
    /// The all-gather of updated shards.
    AllGather,
}

/// A collective over `len` elements (the bucket's).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Shape {
    pub(super) what: Collective,
    pub(super) len: usize,
}

/// Lengths take the low 56 bits of the published word, the collective the top 8.
const LEN_BITS: u32 = 56;

impl Shape {
    fn word(self) -> u64 {
        let code = match self.what {
            Collective::AllReduce(WireFormat::Fp32) => 1,
            Collective::AllReduce(WireFormat::Bf16) => 2,
            Collective::AllReduce(WireFormat::Fp16) => 3,
            Collective::ReduceScatter => 4,
            Collective::AllGather => 5,
        };
        (code << LEN_BITS) | (self.len as u64 & ((1 << LEN_BITS) - 1))
    }

    /// The shape a published word says, in words (a word no rank publishes reads as unknown).
    fn describe(word: u64) -> String {
        let len = word & ((1 << LEN_BITS) - 1);
        let what = match word >> LEN_BITS {
            1 => "an all-reduce",
            2 => "a bf16 all-reduce",
            3 => "an fp16 all-reduce",
            4 => "a reduce-scatter",
            5 => "an all-gather",
            _ => return format!("an unknown collective (word {word:#x})"),
        };
        format!("{what} of a bucket of {len} elements")
    }
}

impl SharedMemory {
    /// Publishes this rank's copy of chunk `sequence`, in slot `slot`, as part of `shape`.
    pub(super) fn post(&self, sequence: u64, slot: usize, shape: Shape) {
        // Ordered before the others read it by `Posted`'s release store.
        self.shape_word(self.rank, slot).store(shape.word(), Ordering::Relaxed);
        self.publish(Flag::Posted, sequence);
    }

    /// Waits until every rank has posted chunk `sequence`, and checks that each posted it as
    /// part of the same `shape`. `false` if `aborting` was set meanwhile, or if a rank's shape
    /// differs: the rank's last words then say how, and the caller aborts the job.
    pub(super) fn wait_posted(&self, sequence: u64, slot: usize, shape: Shape, aborting: &AtomicBool) -> bool {
        if !self.wait_all(Flag::Posted, sequence, aborting) {
            return false;
        }
        // A rank writes this slot's word again only for chunk `sequence + SLOTS`, after every
        // rank's `Consumed >= sequence`, which this rank publishes only after reading it here.
        let mine = shape.word();
        let Some(peer) = (0..self.segments.len()).find(|&r| self.shape_word(r, slot).load(Ordering::Relaxed) != mine)
        else {
            return true;
        };
        let theirs = self.shape_word(peer, slot).load(Ordering::Relaxed);
        last_words::leave(format!(
            "rank {}: error: rank {peer} launched {} where this rank launched {}: every rank must launch the \
             same buckets, in the same order",
            self.rank,
            Shape::describe(theirs),
            Shape::describe(mine),
        ));
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_told_apart_and_described() {
        let shapes = [
            Shape { what: Collective::AllReduce(WireFormat::Fp32), len: 100 },
            Shape { what: Collective::AllReduce(WireFormat::Fp32), len: 200 },
            Shape { what: Collective::AllReduce(WireFormat::Bf16), len: 100 },
            Shape { what: Collective::AllReduce(WireFormat::Fp16), len: 100 },
            Shape { what: Collective::ReduceScatter, len: 100 },
            Shape { what: Collective::AllGather, len: 100 },
        ];
        let words: std::collections::HashSet<u64> = shapes.iter().map(|s| s.word()).collect();
        assert_eq!(words.len(), shapes.len());
        assert_eq!(Shape::describe(shapes[1].word()), "an all-reduce of a bucket of 200 elements");
        assert_eq!(Shape::describe(shapes[4].word()), "a reduce-scatter of a bucket of 100 elements");
        assert_eq!(Shape::describe(0), "an unknown collective (word 0x0)");
    }
}
