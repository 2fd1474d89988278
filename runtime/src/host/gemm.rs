//! Single-precision matrix multiply over strided views.
//!
//! Layers need products with transposed operands (`x·Wᵀ`, `dyᵀ·x`); strided views express the
//! transpose without copying, and the library packs them into its kernels either way. Products
//! run through the system OpenBLAS, on [`crate::host::threads::count`] threads (`--threads`; one by
//! default); `matrixmultiply` takes the shapes CBLAS cannot (see `Kernel`).

/// Read-only `rows x cols` view into a slice with arbitrary non-negative strides.
///
/// Fields are private so that every view in existence addresses only elements inside `data`;
/// [`gemm`] relies on that to call the unsafe kernel soundly.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: isize,
    col_stride: isize,
}

impl<'a> MatRef<'a> {
    /// Views `data` as a row-major `rows x cols` matrix; panics if the length is not
    /// `rows * cols` (a caller bug).
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        assert_eq!(
            data.len(),
            rows * cols,
            "MatRef::row_major: {rows}x{cols} needs {} values, got {}",
            rows * cols,
            data.len()
        );
        // Slices never exceed isize::MAX bytes, so these strides fit.
        MatRef { data, rows, cols, row_stride: cols as isize, col_stride: 1 }
    }

    /// The transpose, as a view of the same data (strides swapped, nothing copied).
    pub fn t(self) -> Self {
        MatRef {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }
}

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
    /// The system OpenBLAS's `cblas_sgemm`.
    OpenBlas,
}

/// `C = alpha·A·B + beta·C`, with `C` a row-major `c_rows x c_cols` matrix in `c`.
///
/// When `beta == 0`, `C`'s previous contents are ignored (NaNs included), so callers may pass an
/// uninitialised-in-spirit buffer. Panics on mismatched shapes or a wrong `c` length (caller
/// bugs).
pub fn gemm(alpha: f32, a: MatRef, b: MatRef, beta: f32, c: &mut [f32], c_rows: usize, c_cols: usize) {
    gemm_with(Kernel::OpenBlas, alpha, a, b, beta, c, c_rows, c_cols);
}

/// [`gemm`] through the library `kernel`, or matrixmultiply where OpenBLAS cannot take it.
#[allow(clippy::too_many_arguments)]
fn gemm_with(kernel: Kernel, alpha: f32, a: MatRef, b: MatRef, beta: f32, c: &mut [f32], c_rows: usize, c_cols: usize) {
    assert_eq!(a.cols, b.rows, "gemm: A is {}x{} but B is {}x{}", a.rows, a.cols, b.rows, b.cols);
    assert!(a.rows == c_rows && b.cols == c_cols, "gemm: A·B is {}x{} but C is {c_rows}x{c_cols}", a.rows, b.cols);
    assert_eq!(c.len(), c_rows * c_cols, "gemm: C of {c_rows}x{c_cols} needs {} values", c_rows * c_cols);
    // SAFETY: `MatRef` can only be built by `row_major` (which checks `data.len() == rows * cols`
    // with strides `(cols, 1)`) and `t` (which swaps dims and strides together), so every
    // element `(i, j)` of `a` and `b` lies inside its slice. The asserts above make the product
    // `c_rows x a.cols x c_cols`, and `c` is an exclusively borrowed, row-major slice of exactly
    // `c_rows * c_cols` elements with strides `(c_cols, 1)`, which never alias each other. `c`
    // cannot overlap `a` or `b`: it is `&mut` while they are shared borrows.
    let kernel = match kernel {
        Kernel::OpenBlas if !openblas::takes(a, b, c_rows, c_cols) => Kernel::MatrixMultiply,
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
                c.as_mut_ptr(),
                c_cols as isize,
                1,
            );
        },
        Kernel::OpenBlas => openblas::sgemm(alpha, a, b, beta, c, c_rows, c_cols),
    }
}

/// The CBLAS call: each operand needs a unit stride on one axis, which every `MatRef` has.
mod openblas {
    use std::ffi::c_int;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use cblas_sys::{cblas_sgemm, CBLAS_LAYOUT, CBLAS_TRANSPOSE};

    use super::MatRef;

    extern "C" {
        /// OpenBLAS's own setter: its pthread build starts one worker per core at load time.
        fn openblas_set_num_threads(threads: c_int);
    }

    /// Whether CBLAS can take these operands as they are: no empty dimension (a leading
    /// dimension of 0 is an argument error there) and every size within `c_int`.
    pub(super) fn takes(a: MatRef, b: MatRef, c_rows: usize, c_cols: usize) -> bool {
        let dims = [a.rows, a.cols, b.cols, c_rows, c_cols];
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

    /// The thread count last given to OpenBLAS; 0 before the first product.
    static APPLIED: AtomicUsize = AtomicUsize::new(0);

    /// `C = alpha·A·B + beta·C`; the caller checked shapes and [`takes`].
    pub(super) fn sgemm(alpha: f32, a: MatRef, b: MatRef, beta: f32, c: &mut [f32], c_rows: usize, c_cols: usize) {
        let threads = crate::host::threads::count();
        if APPLIED.swap(threads, Ordering::Relaxed) != threads {
            // SAFETY: a plain setter with no pointer arguments; `threads` is small (a CLI count).
            unsafe { openblas_set_num_threads(c_int::try_from(threads).unwrap_or(c_int::MAX)) };
        }
        let ((ta, lda), (tb, ldb)) = (layout(&a).expect("checked"), layout(&b).expect("checked"));
        // SAFETY: `takes` made every size and leading dimension a positive `c_int`, and `layout`
        // describes each view exactly as its strides address it, so CBLAS reads only elements
        // of `a.data` and `b.data` (see the bound argument in `gemm_with`). `c` is the
        // exclusively borrowed row-major `c_rows x c_cols` matrix with leading dimension
        // `c_cols`. With `beta == 0` OpenBLAS overwrites `C` without reading it.
        unsafe {
            cblas_sgemm(
                CBLAS_LAYOUT::CblasRowMajor,
                ta,
                tb,
                c_rows as c_int,
                c_cols as c_int,
                a.cols as c_int,
                alpha,
                a.data.as_ptr(),
                lda as c_int,
                b.data.as_ptr(),
                ldb as c_int,
                beta,
                c.as_mut_ptr(),
                c_cols as c_int,
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
            for kernel in [Kernel::MatrixMultiply, Kernel::OpenBlas] {
                let mut c = c0.clone();
                gemm_with(kernel, 0.5, a, b, 2.0, &mut c, m, n);
                assert_close(&c, &want);
            }
        }
    }

    #[test]
    fn beta_zero_ignores_previous_contents() {
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0];
        for kernel in [Kernel::MatrixMultiply, Kernel::OpenBlas] {
            let mut c = [f32::NAN; 4];
            gemm_with(kernel, 1.0, MatRef::row_major(&a, 2, 2), MatRef::row_major(&b, 2, 2), 0.0, &mut c, 2, 2);
            assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        }
    }

    #[test]
    fn empty_inner_dimension_scales_c() {
        for kernel in [Kernel::MatrixMultiply, Kernel::OpenBlas] {
            let mut c = [1.0, 2.0];
            gemm_with(kernel, 1.0, MatRef::row_major(&[], 2, 0), MatRef::row_major(&[], 0, 1), 3.0, &mut c, 2, 1);
            assert_eq!(c, [3.0, 6.0]);
        }
    }

    #[test]
    fn transpose_swaps_shape() {
        let data = [0.0; 6];
        let v = MatRef::row_major(&data, 2, 3).t();
        assert_eq!((v.rows, v.cols), (3, 2));
    }

    #[test]
    #[should_panic(expected = "gemm: A is 2x3 but B is 2x2")]
    fn rejects_mismatched_inner_dimension() {
        let mut c = [0.0; 4];
        gemm(1.0, MatRef::row_major(&[0.0; 6], 2, 3), MatRef::row_major(&[0.0; 4], 2, 2), 0.0, &mut c, 2, 2);
    }

    #[test]
    #[should_panic(expected = "gemm: C of 2x2 needs 4 values")]
    fn rejects_short_c() {
        let mut c = [0.0; 3];
        gemm(1.0, MatRef::row_major(&[0.0; 4], 2, 2), MatRef::row_major(&[0.0; 4], 2, 2), 0.0, &mut c, 2, 2);
    }

    #[test]
    #[should_panic(expected = "MatRef::row_major: 2x3 needs 6 values, got 5")]
    fn rejects_short_view() {
        MatRef::row_major(&[0.0; 5], 2, 3);
    }
}
