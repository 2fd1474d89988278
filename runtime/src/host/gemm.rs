//! Single-precision matrix multiply over strided views.
//!
//! Layers need products with transposed operands (`x·Wᵀ`, `dyᵀ·x`); strided views express the
//! transpose without copying, and the library packs them into its kernels either way. Products
//! run through the system OpenBLAS (or oneMKL, with the `mkl` feature: the same CBLAS calls), on
//! [`crate::host::threads::count`] threads (`--threads`; one by default); `matrixmultiply` takes
//! the shapes CBLAS cannot (see `Kernel`).

pub use super::mat_view::{MatMut, MatRef};

/// Which library computes a product. Measured on the mlp's layers (64 x 2048 x 2048, one
/// core, medians of 15), milliseconds for all four layers:
///
/// | product | matrixmultiply | `gemm` crate | OpenBLAS |
/// |---|---:|---:|---:|
/// | forward `x·Wᵀ` | 19.8 | 21.4 | **17.3** |
/// | input gradient `dy·W` | 19.1 | 15.6 | **13.4** |
/// | weight gradient `dyᵀ·x`, beta 0 | 17.5 | 15.9 | 18.6 |
/// | weight gradient `dyᵀ·x`, beta 1 | | | **15.4** |
///
/// (The weight-gradient rows of the last two columns were measured side by side, alternating.)
///
/// OpenBLAS with beta 0 first clears `C` in a pass of its own, a 40 MB stream for the weight
/// gradients; layers add them into buffers a step starts with cleared instead (see
/// `Layer::backward`). The `gemm` crate, faster with beta 0, allocates its packing buffers in
/// every call, and matrixmultiply too, which a step must not (tested); OpenBLAS maps its buffers
/// once. So OpenBLAS takes every product it can: all of a step's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// `matrixmultiply`: pure Rust, any strides and sizes.
    MatrixMultiply,
    /// The linked CBLAS's `cblas_sgemm`: the system OpenBLAS, or oneMKL (the `mkl` feature).
    Cblas,
}

/// `C = alpha·A·B + beta·C`, with `C` a row-major `c_rows x c_cols` matrix in `c`.
///
/// When `beta == 0`, `C`'s previous contents are ignored (NaNs included), so callers may pass an
/// uninitialised-in-spirit buffer. Panics on mismatched shapes or a wrong `c` length (caller
/// bugs).
pub fn gemm(alpha: f32, a: MatRef, b: MatRef, beta: f32, c: &mut [f32], c_rows: usize, c_cols: usize) {
    gemm_with(Kernel::Cblas, alpha, a, b, beta, MatMut::row_major(c, c_rows, c_cols));
}

/// `C = alpha·A·B + beta·C` into a strided block `c` (see [`MatMut::block`]); elements between
/// its rows are left as they are.
pub fn gemm_into(alpha: f32, a: MatRef, b: MatRef, beta: f32, c: MatMut) {
    gemm_with(Kernel::Cblas, alpha, a, b, beta, c);
}

/// [`gemm`] through the library `kernel`, or matrixmultiply where OpenBLAS cannot take it.
fn gemm_with(kernel: Kernel, alpha: f32, a: MatRef, b: MatRef, beta: f32, c: MatMut) {
    let (c_rows, c_cols) = (c.rows, c.cols);
    assert_eq!(a.cols, b.rows, "gemm: A is {}x{} but B is {}x{}", a.rows, a.cols, b.rows, b.cols);
    assert!(a.rows == c_rows && b.cols == c_cols, "gemm: A·B is {}x{} but C is {c_rows}x{c_cols}", a.rows, b.cols);
    // SAFETY: `MatRef` can only be built by `row_major` (which checks `data.len() == rows * cols`
    // with strides `(cols, 1)`), `block` (which checks that its last row ends inside `data`)
    // and `t` (which swaps dims and strides together), so every element `(i, j)` of `a` and `b`
    // lies inside its slice. `MatMut` is built the same two ways, so every `(i, j)` of `c`, at
    // `i * row_stride + j` with `j < cols <= row_stride`, lies inside its exclusively borrowed
    // slice and no two of them coincide. The asserts above make the product
    // `c_rows x a.cols x c_cols`. `c` cannot overlap `a` or `b`: it is `&mut` while they are
    // shared borrows.
    let kernel = match kernel {
        Kernel::Cblas if !cblas::takes(a, b, &c) => Kernel::MatrixMultiply,
        chosen => chosen,
    };
    match kernel {
        // SAFETY: as above.
        Kernel::MatrixMultiply => unsafe {
            matrixmultiply::sgemm(
                c_rows,
                a.cols,
                c_cols,
                alpha,
                a.data.as_ptr(),
                a.row_stride,
                a.col_stride,
                b.data.as_ptr(),
                b.row_stride,
                b.col_stride,
                beta,
                c.data.as_mut_ptr(),
                c.row_stride as isize,
                1,
            );
        },
        Kernel::Cblas => cblas::sgemm(alpha, a, b, beta, c),
    }
}

/// The CBLAS call: each operand needs a unit stride on one axis, which every `MatRef` has.
mod cblas {
    use std::ffi::c_int;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use cblas_sys::{cblas_sgemm, CBLAS_LAYOUT, CBLAS_TRANSPOSE};

    use super::{MatMut, MatRef};

    #[cfg(not(feature = "mkl"))]
    extern "C" {
        /// OpenBLAS's own setter: its pthread build starts one worker per core at load time.
        fn openblas_set_num_threads(threads: c_int);
    }

    /// Runs later products on `threads` threads, in whichever library is linked.
    fn set_threads(threads: usize) {
        #[cfg(not(feature = "mkl"))]
        // SAFETY: a plain setter with no pointer arguments; `threads` is clamped to `c_int`.
        unsafe {
            openblas_set_num_threads(c_int::try_from(threads).unwrap_or(c_int::MAX))
        };
        // oneMKL's sequential layer runs one thread (`mkl::notes` says so).
        #[cfg(feature = "mkl")]
        let _ = threads;
    }

    /// Whether CBLAS can take these operands as they are: no empty dimension (a leading
    /// dimension of 0 is an argument error there) and every size within `c_int`.
    pub(super) fn takes(a: MatRef, b: MatRef, c: &MatMut) -> bool {
        let dims = [a.rows, a.cols, b.cols, c.rows, c.cols, c.row_stride];
        let fits = |n: usize| n > 0 && c_int::try_from(n).is_ok();
        dims.into_iter().all(fits)
            && [a, b].iter().all(|m| layout(m).is_some_and(|(_, ld)| c_int::try_from(ld).is_ok()))
    }

    /// `(transpose, leading dimension)` of a view as CBLAS row-major sees it.
    fn layout(m: &MatRef) -> Option<(CBLAS_TRANSPOSE, usize)> {
        let (rs, cs) = (m.row_stride as usize, m.col_stride as usize);
        if cs == 1 && rs >= m.cols {
            Some((CBLAS_TRANSPOSE::CblasNoTrans, rs))
        } else if rs == 1 && cs >= m.rows {
            Some((CBLAS_TRANSPOSE::CblasTrans, cs))
        } else {
            None
        }
    }

    /// The thread count last given to the library; 0 before the first product.
    static APPLIED: AtomicUsize = AtomicUsize::new(0);

    /// `C = alpha·A·B + beta·C`; the caller checked shapes and [`takes`].
    pub(super) fn sgemm(alpha: f32, a: MatRef, b: MatRef, beta: f32, c: MatMut) {
        // Before every product, not with the thread count: a second thread's first product
        // would otherwise skip it while the first thread's init runs. After the first, one
        // atomic load.
        #[cfg(feature = "mkl")]
        crate::host::mkl::init();
        let threads = crate::host::threads::count();
        if APPLIED.swap(threads, Ordering::Relaxed) != threads {
            set_threads(threads);
        }
        let ((ta, lda), (tb, ldb)) = (layout(&a).expect("checked"), layout(&b).expect("checked"));
        // SAFETY: `takes` made every size and leading dimension a positive `c_int`, and `layout`
        // describes each view exactly as its strides address it, so CBLAS reads only elements
        // of `a.data` and `b.data` (see the bound argument in `gemm_with`). `c` is the
        // exclusively borrowed row-major `c.rows x c.cols` block with leading dimension
        // `c.row_stride`, inside `c.data`. With `beta == 0` OpenBLAS overwrites `C` without
        // reading it.
        unsafe {
            cblas_sgemm(
                CBLAS_LAYOUT::CblasRowMajor,
                ta,
                tb,
                c.rows as c_int,
                c.cols as c_int,
                a.cols as c_int,
                alpha,
                a.data.as_ptr(),
                lda as c_int,
                b.data.as_ptr(),
                ldb as c_int,
                beta,
                c.data.as_mut_ptr(),
                c.row_stride as c_int,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::InitRng;

    /// Element `(i, j)` of a view, read through its strides.
    fn at(m: &MatRef, i: usize, j: usize) -> f32 {
        m.data[i * m.row_stride as usize + j * m.col_stride as usize]
    }

    fn naive(alpha: f32, a: MatRef, b: MatRef, beta: f32, c: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; a.rows * b.cols];
        for i in 0..a.rows {
            for j in 0..b.cols {
                let ab: f64 = (0..a.cols).map(|k| f64::from(at(&a, i, k)) * f64::from(at(&b, k, j))).sum();
                out[i * b.cols + j] = (f64::from(alpha) * ab + f64::from(beta * c[i * b.cols + j])) as f32;
            }
        }
        out
    }

    fn assert_close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "element {i}: {g} vs {w}");
        }
    }

    #[test]
    fn matches_naive_for_all_transpose_combinations() {
        let mut rng = InitRng::new(7);
        let (m, k, n) = (5, 7, 3);
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a_data = rng.uniform(m * k, 1.0);
            let b_data = rng.uniform(k * n, 1.0);
            // Store the transposed operands transposed, so the views are m x k and k x n.
            let a = if ta { MatRef::row_major(&a_data, k, m).t() } else { MatRef::row_major(&a_data, m, k) };
            let b = if tb { MatRef::row_major(&b_data, n, k).t() } else { MatRef::row_major(&b_data, k, n) };
            let c0 = rng.uniform(m * n, 1.0);
            let want = naive(0.5, a, b, 2.0, &c0);
            for kernel in [Kernel::MatrixMultiply, Kernel::Cblas] {
                let mut c = c0.clone();
                gemm_with(kernel, 0.5, a, b, 2.0, MatMut::row_major(&mut c, m, n));
                assert_close(&c, &want);
            }
        }
    }

    #[test]
    fn beta_zero_ignores_previous_contents() {
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0];
        for kernel in [Kernel::MatrixMultiply, Kernel::Cblas] {
            let mut c = [f32::NAN; 4];
            gemm_with(
                kernel,
                1.0,
                MatRef::row_major(&a, 2, 2),
                MatRef::row_major(&b, 2, 2),
                0.0,
                MatMut::row_major(&mut c, 2, 2),
            );
            assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        }
    }

    #[test]
    fn empty_inner_dimension_scales_c() {
        for kernel in [Kernel::MatrixMultiply, Kernel::Cblas] {
            let mut c = [1.0, 2.0];
            gemm_with(
                kernel,
                1.0,
                MatRef::row_major(&[], 2, 0),
                MatRef::row_major(&[], 0, 1),
                3.0,
                MatMut::row_major(&mut c, 2, 1),
            );
            assert_eq!(c, [3.0, 6.0]);
        }
    }

    #[test]
    fn blocks_are_read_and_written_in_place() {
        // One head's columns of a [t, 3 x width] projection times another's, into the head's
        // columns of a [t, width] output; the elements around the block stay as they were.
        let mut rng = InitRng::new(11);
        let (t, hd, width) = (5, 3, 7);
        let qkv = rng.uniform(t * 3 * width, 1.0);
        let (q, k) = (MatRef::block(&qkv, 2, t, hd, 3 * width), MatRef::block(&qkv, width + 2, t, hd, 3 * width));
        let dense = |m: MatRef| {
            (0..m.rows).flat_map(|i| (0..m.cols).map(move |j| (i, j))).map(|(i, j)| at(&m, i, j)).collect::<Vec<_>>()
        };
        let (q_dense, k_dense) = (dense(q), dense(k));
        let want = naive(
            1.0,
            MatRef::row_major(&q_dense, t, hd),
            MatRef::row_major(&k_dense, t, hd).t(),
            0.0,
            &vec![0.0; t * t],
        );
        for kernel in [Kernel::MatrixMultiply, Kernel::Cblas] {
            let mut out = vec![-1.0; t * 2 * t];
            gemm_with(kernel, 1.0, q, k.t(), 0.0, MatMut::block(&mut out, 1, t, t, 2 * t));
            for i in 0..t {
                assert_close(&out[i * 2 * t + 1..i * 2 * t + 1 + t], &want[i * t..(i + 1) * t]);
            }
            let untouched = out.iter().enumerate().filter(|&(n, _)| n % (2 * t) == 0 || n % (2 * t) > t);
            assert!(untouched.clone().all(|(_, &v)| v == -1.0), "{kernel:?} wrote outside the block");
            assert_eq!(untouched.count(), t * t);
        }
    }

    #[test]
    #[should_panic(expected = "gemm: A is 2x3 but B is 2x2")]
    fn rejects_mismatched_inner_dimension() {
        let mut c = [0.0; 4];
        gemm(1.0, MatRef::row_major(&[0.0; 6], 2, 3), MatRef::row_major(&[0.0; 4], 2, 2), 0.0, &mut c, 2, 2);
    }

    #[test]
    #[should_panic(expected = "MatMut::row_major: 2x2 needs 4 values, got 3")]
    fn rejects_short_c() {
        let mut c = [0.0; 3];
        gemm(1.0, MatRef::row_major(&[0.0; 4], 2, 2), MatRef::row_major(&[0.0; 4], 2, 2), 0.0, &mut c, 2, 2);
    }
}
