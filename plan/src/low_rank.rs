//! PowerSGD's low-rank gradient compression (Vogels et al., NeurIPS 2019), chosen in the schedule
//! with `grad_comm = powersgd(rank = 4)`: which parameters travel as two thin factors, and how
//! many values that puts on the wire. How the runtime computes the factors is its
//! `comm::low_rank`.

/// `powersgd(rank = R, start_iter = K)`: each large matrix gradient travels as factors of rank
/// `rank`; the first `start_iter` steps send every gradient whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LowRank {
    /// Columns of the factors: the rank of the approximation.
    pub rank: usize,
    /// Steps sent uncompressed before compression starts (PyTorch's `start_powerSGD_iter`).
    pub start_iter: u64,
}

impl LowRank {
    /// Steps sent whole when `start_iter` is not given. PyTorch's `PowerSGDState` defaults to
    /// `start_powerSGD_iter = 1000` (its documentation suggests 10% of all steps); ours is 10,
    /// the paper's setting and PyTorch's own before 1.10, because a schedule is compiled for
    /// runs of any length and a default of 1000 would never compress a run shorter than that
    /// (every example here). Long runs should set it: `powersgd(rank = 4, start_iter = 1000)`
    /// is PyTorch's default behaviour.
    pub const DEFAULT_START_ITER: u64 = 10;

    /// The largest `rank` accepted: beyond it, factors rarely save anything.
    pub const MAX_RANK: usize = 1024;

    /// `powersgd(rank = rank, start_iter = start_iter)`, unchecked: the macro checks `rank` against
    /// `MAX_RANK` before it builds one.
    pub fn new(rank: usize, start_iter: u64) -> Self {
        LowRank { rank, start_iter }
    }

    /// A parameter of `shape` as the matrix PowerSGD factorises, `(rows, cols)`: the first
    /// dimension by all the others. `None` (sent whole) for vectors and scalars, and for
    /// matrices whose factors would take half their values or more: PyTorch's `_should_compress`
    /// with its default `min_compression_rate = 2` compresses only when `2 · (rows + cols) · rank
    /// < rows · cols`, strictly.
    pub fn matrix(&self, shape: &[usize]) -> Option<(usize, usize)> {
        let (&rows, rest) = shape.split_first()?;
        if rest.is_empty() {
            return None;
        }
        let cols = rest.iter().fold(1usize, |a, &d| a.saturating_mul(d));
        let factors = rows.saturating_add(cols).saturating_mul(self.rank);
        (factors.saturating_mul(2) < rows.saturating_mul(cols)).then_some((rows, cols))
    }

    /// Values one rank sends for a parameter of `shape` per step: `(rows + cols) · rank` for a
    /// factorised matrix (P, then Q), every value otherwise.
    pub fn wire_values(&self, shape: &[usize]) -> usize {
        match self.matrix(shape) {
            Some((rows, cols)) => rows.saturating_add(cols).saturating_mul(self.rank),
            None => shape.iter().fold(1usize, |a, &d| a.saturating_mul(d)),
        }
    }
}

impl std::fmt::Display for LowRank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "powersgd(rank = {}, start_iter = {})", self.rank, self.start_iter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_matrices_are_factorised_and_vectors_sent_whole() {
        let r4 = LowRank::new(4, 0);
        assert_eq!(r4.matrix(&[2048, 784]), Some((2048, 784)));
        assert_eq!(r4.wire_values(&[2048, 784]), (2048 + 784) * 4);
        assert_eq!(r4.matrix(&[2048]), None);
        assert_eq!(r4.wire_values(&[2048]), 2048);
        assert_eq!(r4.matrix(&[]), None);
        // 8 x 8 = 64 values; factors of rank 4 take 64: not worth it.
        assert_eq!(r4.matrix(&[8, 8]), None);
        assert_eq!(r4.wire_values(&[8, 8]), 64);
        // 16 x 16 = 256; factors 128: exactly half, sent whole (PyTorch's strict `<`).
        assert_eq!(r4.matrix(&[16, 16]), None);
        // 17 x 16 = 272; factors 132: compressed.
        assert_eq!(r4.matrix(&[17, 16]), Some((17, 16)));
        // Higher dimensions: the first by the rest, as PyTorch's hook views a convolution.
        assert_eq!(r4.matrix(&[64, 3, 3, 32]), Some((64, 288)));
    }
}
