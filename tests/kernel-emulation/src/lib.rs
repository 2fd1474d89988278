//! The GPU backend's kernels (`runtime/src/cuda/kernels/*.cu`), compiled for the CPU under
//! `src/emulator.h` and launched there in the grids the backend uses (`launch_shapes`, the
//! backend's own file): one safe function per kernel, taking the kernel's arguments as slices,
//! with every length the kernel relies on checked first: the element-wise layers' and
//! LayerNorm's here, a sequence's (embeddings, attention's softmax, the loss) in `sequence`, the
//! optimizers' in `optimizer`. `products` (the backend's file too) is how the backend hands its
//! products to cuBLAS; `cublas_sgemm` computes one as cuBLAS defines it. `token_rows` (the
//! backend's file too) groups a batch's rows by token for the embedding's backward.

#[path = "../../../runtime/src/cuda/launch_shapes.rs"]
pub mod launch_shapes;
#[path = "../../../runtime/src/cuda/products.rs"]
pub mod products;
#[path = "../../../runtime/src/cuda/token_rows.rs"]
pub mod token_rows;

pub use launch_shapes::Shape;

mod arguments;
mod ffi;
mod optimizer;
mod sequence;

use arguments::{holds, int};

pub use optimizer::{adamw_update, sgd_update, sum_squares};
pub use sequence::{
    causal_softmax, causal_softmax_backward, embedding_backward, embedding_forward, position_backward,
    position_forward, softmax_cross_entropy,
};

/// The element-wise layers with a kernel pair each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Relu,
    Gelu,
    Tanh,
    Sigmoid,
}

impl Activation {
    /// Whether the backward kernel reads the layer's output (tanh, sigmoid) rather than its input.
    pub fn backward_reads_output(self) -> bool {
        matches!(self, Activation::Tanh | Activation::Sigmoid)
    }
}

/// `y = f(x)`.
pub fn activation_forward(shape: Shape, f: Activation, y: &mut [f32], x: &[f32]) {
    holds(y, x.len(), "y");
    let kernel = match f {
        Activation::Relu => ffi::emu_relu_forward,
        Activation::Gelu => ffi::emu_gelu_forward,
        Activation::Tanh => ffi::emu_tanh_forward,
        Activation::Sigmoid => ffi::emu_sigmoid_forward,
    };
    // SAFETY: the forward kernels touch `n` elements of y and x, which both hold.
    unsafe { kernel(shape.grid, shape.block, y.as_mut_ptr(), x.as_ptr(), int(x.len())) }
}

/// `dx = f'(·) ∘ dy`, from the layer's input or output (`Activation::backward_reads_output`).
pub fn activation_backward(shape: Shape, f: Activation, dx: &mut [f32], x_or_y: &[f32], dy: &[f32]) {
    holds(dx, dy.len(), "dx");
    holds(x_or_y, dy.len(), "x or y");
    let kernel = match f {
        Activation::Relu => ffi::emu_relu_backward,
        Activation::Gelu => ffi::emu_gelu_backward,
        Activation::Tanh => ffi::emu_tanh_backward,
        Activation::Sigmoid => ffi::emu_sigmoid_backward,
    };
    // SAFETY: the backward kernels touch `n` elements of each, which all hold.
    unsafe { kernel(shape.grid, shape.block, dx.as_mut_ptr(), x_or_y.as_ptr(), dy.as_ptr(), int(dy.len())) }
}

/// `y[r, c] += bias[c]` over `[rows, bias.len()]`.
pub fn bias_add_rows(shape: Shape, y: &mut [f32], bias: &[f32], rows: usize) {
    holds(y, rows * bias.len(), "y");
    // SAFETY: touches rows x cols elements of y and cols of bias, which they hold.
    unsafe {
        ffi::emu_bias_add_rows(shape.grid, shape.block, y.as_mut_ptr(), bias.as_ptr(), int(rows), int(bias.len()))
    }
}

/// `dbias (+)= column sums of dy`, `dy` being `[rows, dbias.len()]`.
pub fn bias_grad(shape: Shape, dbias: &mut [f32], dy: &[f32], rows: usize, accumulate: bool) {
    let cols = dbias.len();
    holds(dy, rows * cols, "dy");
    // SAFETY: reads rows x cols of dy, writes cols of dbias, which they hold.
    unsafe {
        ffi::emu_bias_grad(
            shape.grid,
            shape.block,
            dbias.as_mut_ptr(),
            dy.as_ptr(),
            int(rows),
            int(cols),
            i32::from(accumulate),
        )
    }
}

/// `y = a + b`.
pub fn add(shape: Shape, y: &mut [f32], a: &[f32], b: &[f32]) {
    holds(y, a.len(), "y");
    holds(b, a.len(), "b");
    // SAFETY: touches n elements of each, which all hold.
    unsafe { ffi::emu_add(shape.grid, shape.block, y.as_mut_ptr(), a.as_ptr(), b.as_ptr(), int(a.len())) }
}

/// `y += a`.
pub fn add_into(shape: Shape, y: &mut [f32], a: &[f32]) {
    holds(y, a.len(), "y");
    // SAFETY: touches n elements of each, which both hold.
    unsafe { ffi::emu_add_into(shape.grid, shape.block, y.as_mut_ptr(), a.as_ptr(), int(a.len())) }
}

/// `y = x ∘ mask · scale` over `[rows, x.len() / rows]`, the mask `draw`'s (Dropout's forward;
/// its backward passes dy and dx).
pub fn dropout(shape: Shape, y: &mut [f32], x: &[f32], rows: usize, draw: overlap_runtime::DropoutDraw) {
    holds(y, x.len(), "y");
    assert!(rows > 0 && x.len().is_multiple_of(rows), "{} elements are not {rows} rows", x.len());
    // SAFETY: touches rows x cols elements of y and x, which both hold.
    unsafe {
        ffi::emu_dropout(
            shape.grid,
            shape.block,
            y.as_mut_ptr(),
            x.as_ptr(),
            int(rows),
            int(x.len() / rows),
            draw.threshold(),
            draw.scale(),
            draw.stream(),
            draw.first_row(),
        )
    }
}

/// `x = x ∘ mask · scale` in place over `[rows, x.len() / rows]` (attention's weight gradients).
pub fn dropout_in_place(shape: Shape, x: &mut [f32], rows: usize, draw: overlap_runtime::DropoutDraw) {
    assert!(rows > 0 && x.len().is_multiple_of(rows), "{} elements are not {rows} rows", x.len());
    let cols = x.len() / rows;
    // SAFETY: touches rows x cols elements of x, which it holds.
    unsafe {
        ffi::emu_dropout_in_place(
            shape.grid,
            shape.block,
            x.as_mut_ptr(),
            int(rows),
            int(cols),
            draw.threshold(),
            draw.scale(),
            draw.stream(),
            draw.first_row(),
        )
    }
}

/// `run()`, with every launch's blocks run last to first instead of first to last. A GPU runs a
/// grid's blocks in any order, so no kernel's results may depend on it: kernels that other tests
/// launch meanwhile compute the same either way (every kernel's block writes outputs of its own).
pub fn with_blocks_last_first<T>(run: impl FnOnce() -> T) -> T {
    /// Turns the order back even when `run` panics.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            // SAFETY: sets an atomic flag the launches read.
            unsafe { ffi::emu_run_blocks_last_first(false) }
        }
    }
    // SAFETY: as above.
    unsafe { ffi::emu_run_blocks_last_first(true) };
    let _reset = Reset;
    run()
}

/// LayerNorm's row statistics, saved by forward.
pub struct RowStats<'a> {
    pub mean: &'a mut [f32],
    pub rstd: &'a mut [f32],
}

/// LayerNorm over `gamma.len()` features of `rows` rows.
pub fn layer_norm_forward(
    shape: Shape,
    y: &mut [f32],
    stats: RowStats,
    x: &[f32],
    (gamma, beta): (&[f32], &[f32]),
    rows: usize,
) {
    let d = gamma.len();
    holds(y, rows * d, "y");
    holds(x, rows * d, "x");
    holds(beta, d, "beta");
    holds(stats.mean, rows, "mean");
    holds(stats.rstd, rows, "rstd");
    // SAFETY: touches rows x d of y and x, rows of mean and rstd, d of gamma and beta.
    unsafe {
        ffi::emu_layer_norm_forward(
            shape.grid,
            shape.block,
            y.as_mut_ptr(),
            stats.mean.as_mut_ptr(),
            stats.rstd.as_mut_ptr(),
            x.as_ptr(),
            gamma.as_ptr(),
            beta.as_ptr(),
            int(rows),
            int(d),
        )
    }
}

/// LayerNorm's input gradient, one block per row.
pub fn layer_norm_backward_input(
    shape: Shape,
    dx: &mut [f32],
    (x, dy, gamma): (&[f32], &[f32], &[f32]),
    (mean, rstd): (&[f32], &[f32]),
) {
    let (d, rows) = (gamma.len(), mean.len());
    for (slice, what) in [(&*dx, "dx"), (x, "x"), (dy, "dy")] {
        holds(slice, rows * d, what);
    }
    holds(rstd, rows, "rstd");
    // SAFETY: touches rows x d of dx, x and dy, rows of mean and rstd, d of gamma.
    unsafe {
        ffi::emu_layer_norm_backward_input(
            shape.grid,
            shape.block,
            dx.as_mut_ptr(),
            x.as_ptr(),
            dy.as_ptr(),
            gamma.as_ptr(),
            mean.as_ptr(),
            rstd.as_ptr(),
            int(rows),
            int(d),
        )
    }
}

/// LayerNorm's parameter gradients, one thread per feature.
pub fn layer_norm_backward_params(
    shape: Shape,
    (dgamma, dbeta): (&mut [f32], &mut [f32]),
    (x, dy): (&[f32], &[f32]),
    (mean, rstd): (&[f32], &[f32]),
    accumulate: bool,
) {
    let (d, rows) = (dgamma.len(), mean.len());
    holds(dbeta, d, "dbeta");
    holds(x, rows * d, "x");
    holds(dy, rows * d, "dy");
    holds(rstd, rows, "rstd");
    // SAFETY: reads rows x d of x and dy and rows of mean and rstd; writes d of dgamma and dbeta.
    unsafe {
        ffi::emu_layer_norm_backward_params(
            shape.grid,
            shape.block,
            dgamma.as_mut_ptr(),
            dbeta.as_mut_ptr(),
            x.as_ptr(),
            dy.as_ptr(),
            mean.as_ptr(),
            rstd.as_ptr(),
            int(rows),
            int(d),
            i32::from(accumulate),
        )
    }
}

/// One `sgemm` as cuBLAS (column-major BLAS) defines it, from the definition: `C[i + j·ldc] =
/// Σ_l op(first)[i, l]·op(second)[l, j] + beta·C[i + j·ldc]`, where `op(X)[i, l]` is
/// `X[l + i·ld]` when transposed and `X[i + l·ld]` otherwise; summed in f64.
pub fn cublas_sgemm(p: products::ColumnMajor, first: &[f32], second: &[f32], beta: f32, c: &mut [f32]) {
    let at = |x: &[f32], transposed: bool, ld: usize, (i, l): (usize, usize)| {
        f64::from(if transposed { x[l + i * ld] } else { x[i + l * ld] })
    };
    for j in 0..p.n {
        for i in 0..p.m {
            let sum: f64 =
                (0..p.k).map(|l| at(first, p.transa, p.lda, (i, l)) * at(second, p.transb, p.ldb, (l, j))).sum();
            let out = &mut c[i + j * p.ldc];
            *out = (sum + if beta == 0.0 { 0.0 } else { f64::from(beta) * f64::from(*out) }) as f32;
        }
    }
}

/// The row-major product `p` of `a` and `b` into `c`, handed to `cublas_sgemm` as the backend's
/// `ops::product` hands it to cuBLAS.
pub fn product(p: products::RowMajor, (a, b): (&[f32], &[f32]), beta: f32, c: &mut [f32]) {
    let (a_needs, b_needs, c_needs) = p.needs_elements();
    holds(a, a_needs, "a");
    holds(b, b_needs, "b");
    holds(c, c_needs, "c");
    cublas_sgemm(p.column_major(), b, a, beta, c);
}

/// One head's products over every sequence as the backend's `ops::head_product` hands them to
/// cuBLAS's strided-batched `sgemm`: batch `s` is `cublas_sgemm` on the operands `s` strides on.
pub fn head_product(p: products::HeadProduct, (a, b): (&[f32], &[f32]), c: &mut [f32]) {
    let (a_needs, b_needs, c_needs) = p.needs_elements();
    holds(a, a_needs, "a");
    holds(b, b_needs, "b");
    holds(c, c_needs, "c");
    let (sa, sb, sc) = p.stride;
    for s in 0..p.sequences {
        cublas_sgemm(p.product.column_major(), &b[s * sb..], &a[s * sa..], 0.0, &mut c[s * sc..]);
    }
}
