//! Row reductions (sum, dot product, maximum) in `LANES` independent partial results, so that
//! the compiler turns them into vector instructions. A plain `iter().sum()` of floats is one
//! chain of dependent additions (the order is fixed, so nothing can be reordered into lanes):
//! a LayerNorm row's mean and variance, a softmax row's sum and attention backward's row dot
//! products took 4 cycles per element that way.
//!
//! Each result depends only on the values and their positions, never on the caller: every rank
//! and every run of one build rounds it the same way (`mul_add` fuses only where the build
//! targets FMA, so builds for other CPUs may round `exp` and `tanh` differently).

/// `a·b + c`, rounded once where the CPU has fused multiply-add (every x86-64-v3 CPU: the
/// vectorised polynomials of `exp` and `tanh` then take half the instructions), else rounded
/// after each operation: without the instruction, `f32::mul_add` is a library call per element.
#[inline(always)]
pub(crate) fn mul_add(a: f32, b: f32, c: f32) -> f32 {
    if cfg!(target_feature = "fma") {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// Partial results per reduction: one 512-bit vector of f32 (two of 256 bits, four of 128).
pub(crate) const LANES: usize = 16;

/// `Σ xs`: element `i` goes to lane `i % LANES` (the tail to lanes from 0), then the lanes are
/// added pairwise, halving (`lane[i] + lane[i + 8]`, then `+ 4`, `+ 2`, `+ 1`): a horizontal
/// reduction in four vector steps, where adding 16 lanes in order would take 16 dependent ones.
#[inline(always)]
pub(crate) fn sum(xs: &[f32]) -> f32 {
    lane_sums(xs, xs, |x, _| x)
}

/// `Σ a·b` over the common length, with [`sum`]'s grouping.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    lane_sums(a, b, |a, b| a * b)
}

/// `Σ (x - centre)²`, with [`sum`]'s grouping.
#[inline(always)]
pub(crate) fn squared_deviations(xs: &[f32], centre: f32) -> f32 {
    lane_sums(xs, xs, |x, _| (x - centre) * (x - centre))
}

/// `Σ term(a[i], b[i])` over the common length, grouped as [`sum`] states.
#[inline(always)]
fn lane_sums(a: &[f32], b: &[f32], term: impl Fn(f32, f32) -> f32) -> f32 {
    let n = a.len().min(b.len());
    let (mut a, mut b) = (a[..n].chunks_exact(LANES), b[..n].chunks_exact(LANES));
    let mut lanes = [0.0f32; LANES];
    for (x, y) in (&mut a).zip(&mut b) {
        for l in 0..LANES {
            lanes[l] += term(x[l], y[l]);
        }
    }
    for ((acc, &x), &y) in lanes.iter_mut().zip(a.remainder()).zip(b.remainder()) {
        *acc += term(x, y);
    }
    halve(lanes, |a, b| a + b)
}

/// The lanes combined pairwise, halving: `op(lane[i], lane[i + 8])`, then `+ 4`, `+ 2`, `+ 1`.
/// The largest of `xs[..n]` (`-inf` when `n` is 0), exact in any grouping, reading `xs` in whole
/// vectors of `LANES` (entries from `n` on count as −∞, whatever they hold), so that a prefix of
/// any length costs no scalar loop when `xs` is a whole number of vectors. NaNs are passed over
/// (one comparison per element, as the vector instruction makes it; an all-NaN prefix gives
/// `-inf`): callers feed the maximum back into arithmetic with every element, which turns a NaN
/// input into NaN outputs all the same.
#[inline(always)]
pub(crate) fn max_of_first(xs: &[f32], n: usize) -> f32 {
    let larger = |a: f32, b: f32| if b > a { b } else { a };
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for (c, chunk) in (&mut chunks).enumerate() {
        for (l, (m, &x)) in lanes.iter_mut().zip(chunk).enumerate() {
            *m = larger(*m, if c * LANES + l < n { x } else { f32::NEG_INFINITY });
        }
    }
    let at = xs.len() / LANES * LANES;
    for (l, (m, &x)) in lanes.iter_mut().zip(chunks.remainder()).enumerate() {
        *m = larger(*m, if at + l < n { x } else { f32::NEG_INFINITY });
    }
    halve(lanes, larger)
}

#[inline(always)]
fn halve(mut lanes: [f32; LANES], op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for i in 0..width {
            lanes[i] = op(lanes[i], lanes[i + width]);
        }
        width /= 2;
    }
    lanes[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grouping the documentation states, written out element by element.
    fn grouped(xs: &[f32]) -> f32 {
        let mut lanes = [0.0f32; LANES];
        for (i, &x) in xs.iter().enumerate() {
            lanes[i % LANES] += x;
        }
        let mut width = LANES / 2;
        while width > 0 {
            for i in 0..width {
                lanes[i] += lanes[i + width];
            }
            width /= 2;
        }
        lanes[0]
    }

    #[test]
    fn sums_group_by_lane_and_match_f64_closely() {
        for n in [0, 1, 5, 15, 16, 17, 64, 100, 128, 513] {
            let xs: Vec<f32> = (0..n).map(|i| ((i * 7919 % 113) as f32 - 56.0) / 9.0).collect();
            let ys: Vec<f32> = (0..n).map(|i| ((i * 104_729 % 97) as f32 - 48.0) / 7.0).collect();
            assert_eq!(sum(&xs).to_bits(), grouped(&xs).to_bits(), "n = {n}");
            let products: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| a * b).collect();
            assert_eq!(dot(&xs, &ys).to_bits(), grouped(&products).to_bits(), "n = {n}");
            let exact: f64 = xs.iter().zip(&ys).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
            let scale: f64 = xs.iter().zip(&ys).map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs()).sum();
            assert!((f64::from(dot(&xs, &ys)) - exact).abs() <= 1e-6 * scale.max(1.0), "n = {n}");
            let mean = sum(&xs) / n.max(1) as f32;
            let deviations: Vec<f32> = xs.iter().map(|x| (x - mean) * (x - mean)).collect();
            assert_eq!(squared_deviations(&xs, mean).to_bits(), grouped(&deviations).to_bits(), "n = {n}");
        }
    }

    #[test]
    fn max_is_the_sequential_fold() {
        for n in [0, 1, 3, 16, 31, 64] {
            let xs: Vec<f32> = (0..n).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.5).collect();
            for first in 0..=n {
                let mut padded = xs.clone();
                padded[first..].fill(f32::INFINITY);
                let want = xs[..first].iter().copied().fold(f32::NEG_INFINITY, f32::max);
                assert_eq!(max_of_first(&padded, first), want, "first {first} of {n}");
            }
        }
    }
}
