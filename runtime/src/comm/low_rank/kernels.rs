//! The loops PowerSGD's passes over a gradient row are made of, written so that the compiler
//! vectorises them: the factors' columns go four at a time (`GROUP`), so each pass reads the row
//! once per four columns, and sums run in eight independent lanes (a single running sum would
//! forbid reordering the additions). All are deterministic: the same inputs give the same bits
//! on every rank.

/// Columns of a factor handled per pass over a row.
pub(super) const GROUP: usize = 4;
/// Lanes of a dot product's partial sums.
const LANES: usize = 8;

/// `out[c] = Σ_j row[j]·qs[c][j]`: a row of M times N columns of Q (each `qs[c]` a row of Qᵀ).
pub(super) fn dots<const N: usize>(row: &[f32], qs: [&[f32]; N]) -> [f32; N] {
    let mut lanes = [[0.0f32; LANES]; N];
    let whole = row.len() / LANES * LANES;
    for j in (0..whole).step_by(LANES) {
        let x = &row[j..j + LANES];
        for (lanes, q) in lanes.iter_mut().zip(&qs) {
            let q = &q[j..j + LANES];
            for k in 0..LANES {
                lanes[k] += x[k] * q[k];
            }
        }
    }
    std::array::from_fn(|c| {
        let tail: f32 = row[whole..].iter().zip(&qs[c][whole..]).map(|(x, q)| x * q).sum();
        lanes[c].iter().sum::<f32>() + tail
    })
}

/// `qs[c] += ps[c]·row`: N columns of Mᵀ·P (rows of its transpose) gaining one row's terms.
pub(super) fn axpys<const N: usize>(ps: [f32; N], row: &[f32], mut qs: [&mut [f32]; N]) {
    let whole = row.len() / LANES * LANES;
    for j in (0..whole).step_by(LANES) {
        let x = &row[j..j + LANES];
        for (q, p) in qs.iter_mut().zip(ps) {
            let q = &mut q[j..j + LANES];
            for k in 0..LANES {
                q[k] += p * x[k];
            }
        }
    }
    for (q, p) in qs.iter_mut().zip(ps) {
        q[whole..].iter_mut().zip(&row[whole..]).for_each(|(q, x)| *q += p * x);
    }
}

/// `out = Σ_c ps[c]·qs[c]` (or `out +=` it, with `add`): a row of P·Qᵀ from N columns.
pub(super) fn combine<const N: usize>(ps: [f32; N], qs: [&[f32]; N], out: &mut [f32], add: bool) {
    let whole = out.len() / LANES * LANES;
    let term = |j: usize| qs.iter().zip(ps).map(|(q, p)| p * q[j]).fold(0.0, |a, b| a + b);
    for j in (0..whole).step_by(LANES) {
        let mut sum = [0.0f32; LANES];
        for (q, p) in qs.iter().zip(ps) {
            let q = &q[j..j + LANES];
            for k in 0..LANES {
                sum[k] += p * q[k];
            }
        }
        let o = &mut out[j..j + LANES];
        for k in 0..LANES {
            o[k] = if add { o[k] + sum[k] } else { sum[k] };
        }
    }
    for (j, o) in out.iter_mut().enumerate().skip(whole) {
        *o = if add { *o + term(j) } else { term(j) };
    }
}

/// The rows of a factor stored transposed (`rank x cols`) in groups of `GROUP`, then one by
/// one: what the kernels above take, with the matching entries of a row of P.
pub(super) fn groups(rank: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let full = rank / GROUP * GROUP;
    (0..full).step_by(GROUP).map(|c| c..c + GROUP).chain((full..rank).map(|c| c..c + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_compute_what_they_say_at_any_length() {
        for n in [0, 1, 7, 8, 9, 100] {
            let row: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
            let q: Vec<Vec<f32>> = (0..GROUP).map(|c| (0..n).map(|i| c as f32 + 3.0 - i as f32).collect()).collect();
            let qs: [&[f32]; GROUP] = std::array::from_fn(|c| &q[c][..]);
            let exact = |c: usize| row.iter().zip(&q[c]).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum::<f64>();
            for (c, d) in dots(&row, qs).into_iter().enumerate() {
                assert!((f64::from(d) - exact(c)).abs() <= 1e-3 * exact(c).abs().max(1.0), "{n} {c}");
            }
            let mut y = q.clone();
            let (a, rest) = y.split_at_mut(1);
            let (b, rest) = rest.split_at_mut(1);
            let (c, d) = rest.split_at_mut(1);
            axpys([1.0, 2.0, 3.0, 4.0], &row, [&mut a[0][..], &mut b[0][..], &mut c[0][..], &mut d[0][..]]);
            for (c, y) in y.iter().enumerate() {
                assert!(y.iter().zip(&q[c]).zip(&row).all(|((y, q), x)| *y == q + (c + 1) as f32 * x), "{n} {c}");
            }
            let mut out = vec![1.0; n];
            combine([1.0, 0.0, 0.0, 2.0], qs, &mut out, true);
            assert!(out.iter().enumerate().all(|(j, o)| *o == 1.0 + q[0][j] + 2.0 * q[3][j]), "{n}");
            combine([1.0, 0.0, 0.0, 0.0], qs, &mut out, false);
            assert_eq!(out, q[0], "{n}");
        }
        assert_eq!(groups(9).collect::<Vec<_>>(), [0..4, 4..8, 8..9]);
        assert_eq!(groups(2).collect::<Vec<_>>(), [0..1, 1..2]);
    }
}
