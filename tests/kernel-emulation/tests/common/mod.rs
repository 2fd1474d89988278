//! What the emulation's tests share: inputs, and the comparison with the CPU's results.

use overlap_runtime::InitRng;

/// `n` values uniform in `[-bound, bound]`, the same for the same `seed`.
pub fn values(n: usize, seed: u64, bound: f32) -> Vec<f32> {
    InitRng::new(seed).uniform(n, bound)
}

/// `|got - want| <= tol · max(1, |want|)` everywhere.
pub fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * w.abs().max(1.0), "{what}, element {i}: {g} against {w}");
    }
}
