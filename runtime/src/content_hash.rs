//! A fast 64-bit hash of numbers in memory (parameters, optimizer state, a dataset's samples),
//! for ranks to compare what they start from without sending it. Not cryptographic: it tells
//! apart files and states that differ by mistake, not by design.

/// Four independent multiply-rotate lanes (one would be a chain of dependent multiplies, four
/// cycles a word), combined at the end; every word moves every lane's result.
#[derive(Debug, Clone)]
pub struct ContentHash {
    lanes: [u64; 4],
    words: u64,
}

const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

impl Default for ContentHash {
    fn default() -> Self {
        ContentHash { lanes: [1, 2, 3, 4], words: 0 }
    }
}

impl ContentHash {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds 32-bit words; their count is added too, so that `[a] [b, c]` and `[a, b] [c]` differ.
    pub fn u32s(&mut self, words: impl Iterator<Item = u32>) {
        let mut sequence = self.sequence();
        words.for_each(|word| sequence.word(word));
        sequence.finish();
    }

    /// One sequence of words added in pieces (a file read a chunk at a time): the hash `u32s`
    /// gives the whole sequence at once.
    pub fn sequence(&mut self) -> Sequence<'_> {
        Sequence { hash: self, count: 0 }
    }

    /// Adds floats by their bits (so that -0.0 and 0.0, or two NaNs, count as the files hold them).
    pub fn f32s(&mut self, values: &[f32]) {
        self.u32s(values.iter().map(|v| v.to_bits()));
    }

    pub fn u64(&mut self, value: u64) {
        self.words = (self.words ^ value).wrapping_mul(MULTIPLIER).rotate_left(31);
    }

    pub fn finish(&self) -> u64 {
        self.lanes.iter().fold(self.words, |h, &lane| (h ^ lane).wrapping_mul(MULTIPLIER).rotate_left(27))
    }
}

fn mix(lane: u64, word: u32) -> u64 {
    (lane ^ u64::from(word)).wrapping_mul(MULTIPLIER).rotate_left(29)
}

/// A sequence of words being added to a `ContentHash` (see `ContentHash::sequence`); `finish`
/// adds its length, without which `[a] [b, c]` and `[a, b] [c]` would hash alike.
#[must_use = "`finish` adds the sequence's length to the hash"]
pub struct Sequence<'a> {
    hash: &'a mut ContentHash,
    /// Words so far: the next one goes to lane `count % 4`.
    count: usize,
}

impl Sequence<'_> {
    pub fn word(&mut self, word: u32) {
        let lane = &mut self.hash.lanes[self.count % 4];
        *lane = mix(*lane, word);
        self.count += 1;
    }

    /// 16-bit words (token ids), each as the 32-bit word it widens to. Four at a time in
    /// registers: a token shard of gigabytes is hashed at memory speed, not at one call a token.
    pub fn u16s(&mut self, words: &[u16]) {
        let unaligned = ((4 - self.count % 4) % 4).min(words.len());
        let (head, rest) = words.split_at(unaligned);
        head.iter().for_each(|&w| self.word(w.into()));
        let quads = rest.chunks_exact(4);
        let tail = quads.remainder();
        let [mut a, mut b, mut c, mut d] = self.hash.lanes;
        for quad in quads {
            a = mix(a, quad[0].into());
            b = mix(b, quad[1].into());
            c = mix(c, quad[2].into());
            d = mix(d, quad[3].into());
        }
        self.hash.lanes = [a, b, c, d];
        self.count += rest.len() - tail.len();
        tail.iter().for_each(|&w| self.word(w.into()));
    }

    /// Ends the sequence, adding its length.
    pub fn finish(self) {
        self.hash.u64(self.count as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(parts: &[&[f32]]) -> u64 {
        let mut h = ContentHash::new();
        parts.iter().for_each(|p| h.f32s(p));
        h.finish()
    }

    #[test]
    fn any_changed_value_position_or_grouping_changes_the_hash() {
        let base = of(&[&[1.0, 2.0, 3.0, 4.0, 5.0]]);
        assert_eq!(base, of(&[&[1.0, 2.0, 3.0, 4.0, 5.0]]));
        for i in 0..5 {
            let mut changed: [f32; 5] = [1.0, 2.0, 3.0, 4.0, 5.0];
            changed[i] = f32::from_bits(changed[i].to_bits() ^ 1);
            assert_ne!(base, of(&[&changed]), "one bit of value {i}");
        }
        assert_ne!(base, of(&[&[2.0, 1.0, 3.0, 4.0, 5.0]]), "two values swapped");
        assert_ne!(base, of(&[&[1.0, 2.0], &[3.0, 4.0, 5.0]]), "other tensors");
        assert_ne!(of(&[&[0.0]]), of(&[&[-0.0]]));
    }

    #[test]
    fn a_sequence_in_pieces_hashes_as_the_words_at_once() {
        let words: Vec<u16> = (0..1000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 16) as u16).collect();
        let mut whole = ContentHash::new();
        whole.u32s(words.iter().map(|&w| u32::from(w)));
        for cuts in [vec![], vec![1], vec![3, 7], vec![4, 8, 999], vec![2, 2, 5, 500, 501, 998]] {
            let mut pieces = ContentHash::new();
            let mut sequence = pieces.sequence();
            let mut at = 0;
            for cut in cuts.iter().copied().chain([words.len()]) {
                sequence.u16s(&words[at..cut]);
                at = cut;
            }
            sequence.finish();
            assert_eq!(pieces.finish(), whole.finish(), "cut at {cuts:?}");
        }
        let mut fewer = ContentHash::new();
        let mut sequence = fewer.sequence();
        sequence.u16s(&words[..999]);
        sequence.finish();
        assert_ne!(fewer.finish(), whole.finish());
    }

    /// Checkpoints record the data's hash and a resume compares it: another value for the same
    /// words would warn every resumed run of other data.
    #[test]
    fn the_hash_of_given_words_stays_what_checkpoints_recorded() {
        let mut hash = ContentHash::new();
        hash.u32s((0..1003u32).map(|i| i.wrapping_mul(2_654_435_761) >> 16));
        hash.u64(7);
        assert_eq!(hash.finish(), 0x1999_254e_be1c_6a65);
    }
}
