//! The two loops PowerSGD's passes over a gradient row are made of, written so that the
//! compiler vectorises them: a dot product in eight independent lanes (a single running sum
//! would forbid reordering the additions) and an axpy. Both are deterministic: the same inputs
//! give the same bits on every rank.

/// Lanes of the dot product's partial sums.
const LANES: usize = 8;

/// `Σ a[j]·b[j]`.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut lanes = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for k in 0..LANES {
            lanes[k] += x[k] * y[k];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `y += alpha·x`.
pub(super) fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    debug_assert_eq!(x.len(), y.len());
    y.iter_mut().zip(x).for_each(|(y, x)| *y += alpha * x);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_and_axpy_compute_what_they_say_at_any_length() {
        for n in [0, 1, 7, 8, 9, 100] {
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
            let b: Vec<f32> = (0..n).map(|i| 3.0 - i as f32).collect();
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            assert!((f64::from(dot(&a, &b)) - exact).abs() <= 1e-3 * exact.abs().max(1.0), "{n}");
            let mut y = b.clone();
            axpy(2.0, &a, &mut y);
            assert!(y.iter().zip(a.iter().zip(&b)).all(|(y, (a, b))| *y == b + 2.0 * a), "{n}");
        }
    }
}
