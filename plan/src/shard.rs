//! Which elements of a bucket each rank owns when the optimizer state is sharded (ZeRO-1,
//! `#[distributed_model(shard_optimizer)]`): a contiguous slice per rank, balanced to the
//! element, so no rank holds more than one element of state above another for any bucket.
//!
//! Ranks own their slices in rank order: the first `numel % world` ranks one element more. The
//! runtime's reduce-scatter leaves each rank the sums of its slice, its update touches only
//! those elements (with optimizer state for them alone), and the all-gather returns every
//! rank's updated slice to all.

use std::ops::Range;

/// The elements of a bucket of `numel` that rank `rank` of `world` owns.
pub fn shard_of(numel: usize, world: usize, rank: usize) -> Range<usize> {
    assert!(world > 0 && rank < world, "rank {rank} of {world} ranks");
    let (base, extra) = (numel / world, numel % world);
    let start = rank * base + rank.min(extra);
    start..start + base + usize::from(rank < extra)
}

/// The part of a parameter at `offset..offset + len` of its bucket that falls in `shard`, as a
/// range of the parameter's own elements (empty when the shard holds none of it).
pub fn owned_part(offset: usize, len: usize, shard: &Range<usize>) -> Range<usize> {
    let start = offset.max(shard.start).min(offset + len);
    let end = (offset + len).min(shard.end).max(start);
    start - offset..end - offset
}

/// Rank `rank`'s shard of a bucket of `numel` cut to `range` (empty when they do not meet), as
/// elements of the bucket: what it sends of an all-gather of `range`.
pub fn shard_within(numel: usize, world: usize, rank: usize, range: &Range<usize>) -> Range<usize> {
    let part = owned_part(range.start, range.len(), &shard_of(numel, world, rank));
    range.start + part.start..range.start + part.end
}

/// Round `round`'s run of at most `piece_len` elements of `range`, in order (empty past its
/// end): how a transport carries a shard through buffers of bounded size.
pub fn round_piece(range: Range<usize>, round: usize, piece_len: usize) -> Range<usize> {
    let start = (range.start + round * piece_len).min(range.end);
    start..(start + piece_len).min(range.end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_a_bucket_in_order_balanced_to_the_element() {
        for numel in [0, 1, 2, 3, 7, 10, 1000, 1001] {
            for world in 1..=9 {
                let mut next = 0;
                let sizes: Vec<usize> = (0..world)
                    .map(|rank| {
                        let s = shard_of(numel, world, rank);
                        assert_eq!(s.start, next, "{numel} elements, {world} ranks, rank {rank}");
                        next = s.end;
                        s.len()
                    })
                    .collect();
                assert_eq!(next, numel);
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(max - min <= 1, "{numel} elements on {world} ranks: {sizes:?}");
            }
        }
        assert_eq!(shard_of(10, 3, 0), 0..4);
        assert_eq!(shard_of(10, 3, 1), 4..7);
        assert_eq!(shard_of(10, 3, 2), 7..10);
    }

    #[test]
    fn a_shard_cut_to_a_range_and_a_range_in_rounds() {
        // Shards of 10 on 3 ranks: 0..4, 4..7, 7..10.
        let cut: Vec<_> = (0..3).map(|r| shard_within(10, 3, r, &(3..8))).collect();
        assert_eq!(cut, [3..4, 4..7, 7..8]);
        assert!(shard_within(10, 3, 2, &(0..5)).is_empty() && shard_within(10, 3, 0, &(6..9)).is_empty());
        let rounds: Vec<_> = (0..4).map(|k| round_piece(3..10, k, 3)).collect();
        assert_eq!(rounds, [3..6, 6..9, 9..10, 10..10]);
    }

    #[test]
    fn a_parameter_owns_what_the_shard_holds_of_it() {
        let shard = 4..7;
        assert_eq!(owned_part(0, 3, &shard), 3..3);
        assert_eq!(owned_part(2, 4, &shard), 2..4);
        assert_eq!(owned_part(5, 1, &shard), 0..1);
        assert_eq!(owned_part(6, 10, &shard), 0..1);
        assert_eq!(owned_part(3, 5, &shard), 1..4);
        assert_eq!(owned_part(7, 3, &shard), 0..0);
        assert!(owned_part(9, 3, &shard).is_empty());
    }
}
