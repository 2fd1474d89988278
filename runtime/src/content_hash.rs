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
        let mut count = 0;
        for word in words {
            let lane = &mut self.lanes[count % 4];
            *lane = (*lane ^ u64::from(word)).wrapping_mul(MULTIPLIER).rotate_left(29);
            count += 1;
        }
        self.u64(count as u64);
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
}
