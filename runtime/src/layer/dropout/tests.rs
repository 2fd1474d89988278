use super::*;
use crate::layer::dropout_draw::{element_draw, row_key};

const SEED: u64 = 1337;

fn ctx(rows: usize, draw: DropoutDraw) -> StepContext {
    StepContext::rows(rows).with_dropout(draw)
}

/// A matrix of nonzero values, so that a zero in the output can only be a drop.
fn input(rows: usize, cols: usize) -> Matrix {
    Matrix::from_vec(rows, cols, (0..rows * cols).map(|i| 0.5 + (i % 97) as f32 * 0.25).collect())
}

fn forward(draw: DropoutDraw, x: &Matrix) -> Matrix {
    let mut y = Matrix::default();
    Dropout.forward(&ctx(x.rows(), draw), x, &mut y, &mut ());
    y
}

#[test]
fn without_a_rate_it_is_the_identity_both_ways() {
    let x = input(7, 13);
    assert_eq!(forward(DropoutDraw::default(), &x).as_slice(), x.as_slice());
    assert_eq!(forward(DropoutDraw::new(0.0, SEED, 0), &x).as_slice(), x.as_slice());
    let mut dx = Matrix::default();
    let c = ctx(7, DropoutDraw::default());
    Dropout.backward(&c, &x, &x, &(), &x, &mut [], false, Some(&mut dx));
    assert_eq!(dx.as_slice(), x.as_slice());
}

#[test]
fn kept_elements_are_scaled_as_pytorch_scales_them() {
    // PyTorch 2.15: `F.dropout(x, p)[kept] == x[kept] * float32(1 / (1 - p))` bitwise, for
    // p in 0.05, 0.1, 0.2, 0.3, 0.7 (checked with torch.equal).
    for (rate, scale) in [(0.2f32, 1.25f32), (0.1, 1.111_111_2), (0.3, 1.428_571_5), (0.7, 3.333_333_3)] {
        let x = input(64, 100);
        let y = forward(DropoutDraw::new(rate, SEED, 0), &x);
        assert_eq!(DropoutDraw::new(rate, SEED, 0).scale(), scale);
        let mut kept = 0usize;
        for (&y, &x) in y.as_slice().iter().zip(x.as_slice()) {
            if y != 0.0 {
                assert_eq!(y, x * scale);
                kept += 1;
            }
        }
        // 6400 draws: the kept share within 5 standard deviations of 1 - rate.
        let n = x.as_slice().len() as f64;
        let p = 1.0 - f64::from(rate);
        let sigma = (n * p * (1.0 - p)).sqrt();
        assert!((kept as f64 - n * p).abs() < 5.0 * sigma, "rate {rate}: kept {kept} of {n}");
    }
}

#[test]
fn draws_are_uniform_and_pairs_independent() {
    // 2¹⁸ draws over rows and columns: each of 16 bins near 1/16, and each column's draw
    // uncorrelated with its right neighbour's and with the same column one row down.
    let draw = DropoutDraw::new(0.5, SEED, 0).for_layer(3);
    let (rows, cols) = (512u64, 512u32);
    let mut bins = [0u64; 16];
    let (mut right, mut below) = (0u64, 0u64);
    let dropped = |r: u64, c: u32| element_draw(row_key(draw.stream(), r), c) < draw.threshold();
    for r in 0..rows {
        for c in 0..cols {
            bins[(element_draw(row_key(draw.stream(), r), c) >> 20) as usize] += 1;
            right += u64::from(c + 1 < cols && dropped(r, c) && dropped(r, c + 1));
            below += u64::from(r + 1 < rows && dropped(r, c) && dropped(r + 1, c));
        }
    }
    let n = (rows * u64::from(cols)) as f64;
    for (i, &b) in bins.iter().enumerate() {
        let sigma = (n / 16.0 * 15.0 / 16.0).sqrt();
        assert!((b as f64 - n / 16.0).abs() < 5.0 * sigma, "bin {i}: {b}");
    }
    // Both dropped: a quarter of the pairs.
    let pairs = n - rows as f64;
    let sigma = (pairs * 0.25 * 0.75).sqrt();
    assert!((right as f64 - pairs / 4.0).abs() < 5.0 * sigma, "{right} of {pairs}");
    assert!((below as f64 - pairs / 4.0).abs() < 5.0 * sigma, "{below} of {pairs}");
}

#[test]
fn masks_differ_by_layer_seed_and_row_and_follow_the_run_wide_row() {
    let x = input(8, 64);
    let draw = DropoutDraw::new(0.5, SEED, 40);
    let base = forward(draw.for_layer(0), &x);
    for other in [draw.for_layer(1), DropoutDraw::new(0.5, SEED + 1, 40).for_layer(0), DropoutDraw::new(0.5, SEED, 48)]
    {
        assert_ne!(forward(other, &x).as_slice(), base.as_slice(), "{other:?}");
    }
    // Rows 40..48 of the run, masked as two micro-batches of 4 (two ranks' shares): the same.
    let (top, bottom) = x.as_slice().split_at(4 * 64);
    let first = forward(DropoutDraw::new(0.5, SEED, 40).for_layer(0), &Matrix::from_vec(4, 64, top.to_vec()));
    let second = forward(DropoutDraw::new(0.5, SEED, 44).for_layer(0), &Matrix::from_vec(4, 64, bottom.to_vec()));
    assert_eq!([first.as_slice(), second.as_slice()].concat(), base.as_slice());
}

#[test]
fn backward_drops_what_forward_dropped() {
    let x = input(16, 33);
    let draw = DropoutDraw::new(0.3, SEED, 5).for_layer(2);
    let y = forward(draw, &x);
    let dy = Matrix::from_vec(16, 33, vec![2.0; 16 * 33]);
    let mut dx = Matrix::default();
    Dropout.backward(&ctx(16, draw), &x, &y, &(), &dy, &mut [], false, Some(&mut dx));
    for (&g, &y) in dx.as_slice().iter().zip(y.as_slice()) {
        assert_eq!(g, if y == 0.0 { 0.0 } else { 2.0 * draw.scale() });
    }
}

#[test]
fn non_finite_values_stay_non_finite_where_dropped() {
    // PyTorch: `F.dropout` of NaN is NaN everywhere, of infinity NaN where dropped.
    let x = Matrix::from_vec(1, 64, [f32::NAN, f32::INFINITY].repeat(32));
    let y = forward(DropoutDraw::new(0.5, SEED, 0), &x);
    assert!(y.as_slice().iter().all(|v| !v.is_finite()), "{:?}", y.as_slice());
}

#[test]
fn the_contexts_rate_is_resolved_to_24_bits() {
    assert!(!DropoutDraw::new(1e-9, SEED, 0).active());
    assert_eq!(DropoutDraw::new(0.5, SEED, 0).threshold(), 1 << 23);
    assert_eq!(DropoutDraw::new(1.0 - f32::EPSILON / 2.0, SEED, 0).threshold(), (1 << 24) - 1);
}
