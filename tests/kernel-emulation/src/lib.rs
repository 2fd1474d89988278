//! The GPU backend's kernels (`runtime/src/cuda/kernels/*.cu`), compiled for the CPU under
//! `src/emulator.h` and launched there in the grids the backend uses (`launch_shapes`, the
//! backend's own file): one safe function per kernel, taking the kernel's arguments as slices,
//! with every length the kernel relies on checked first. `products` (the backend's file too) is
//! how the backend hands its products to cuBLAS; `cublas_sgemm` computes one as cuBLAS defines it. `token_rows` (the backend's file too) groups a
//! batch's rows by token for the embedding's backward.

#[path = "../../../runtime/src/cuda/launch_shapes.rs"]
pub mod launch_shapes;
#[path = "../../../runtime/src/cuda/products.rs"]
pub mod products;
#[path = "../../../runtime/src/cuda/token_rows.rs"]
pub mod token_rows;

pub use launch_shapes::Shape;
use overlap_runtime::optim::{AdamWStep, SgdRule};

mod ffi;

/// A size as the kernels' `int`.
fn int(n: usize) -> i32 {
    i32::try_from(n).expect("the kernels take sizes below 2^31")
}

/// Panics unless `slice` holds at least `needed` elements (a caller bug).
fn holds<T>(slice: &[T], needed: usize, what: &str) {
    assert!(slice.len() >= needed, "{what}: {} elements, the kernel reads or writes {needed}", slice.len());
}

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

/// Panics unless every id is an integral float naming a row of a table of `table_rows`.
fn check_ids(ids: &[f32], table_rows: usize) {
    for (r, &id) in ids.iter().enumerate() {
        assert!(
            id >= 0.0 && id.fract() == 0.0 && (id as usize) < table_rows,
            "id {id} of row {r} is not a row of the table"
        );
    }
}

/// `y[r] = w[ids[r]]`, rows of width `d`.
pub fn embedding_forward(shape: Shape, y: &mut [f32], ids: &[f32], w: &[f32], d: usize) {
    check_ids(ids, w.len() / d);
    holds(y, ids.len() * d, "y");
    // SAFETY: writes rows x d of y and reads the rows of w the ids name, which exist (checked).
    unsafe {
        ffi::emu_embedding_forward(
            shape.grid,
            shape.block,
            y.as_mut_ptr(),
            ids.as_ptr(),
            w.as_ptr(),
            int(ids.len()),
            int(d),
        )
    }
}

/// `dw[ids[r]] += dy[r]`, each token's rows added in their order: the ids grouped by token
/// first, as the backend groups a batch's (`token_rows`).
pub fn embedding_backward(shape: Shape, dw: &mut [f32], ids: &[f32], dy: &[f32], d: usize) {
    let vocab = dw.len() / d;
    check_ids(ids, vocab);
    holds(dy, ids.len() * d, "dy");
    let mut grouped = token_rows::TokenRows::default();
    grouped.group(ids, vocab);
    // SAFETY: the table holds `rows + 2 * groups + 1` entries: rows of dy, which holds rows x d
    // gradients, and tokens whose rows of dw exist (checked).
    unsafe {
        ffi::emu_embedding_backward(
            shape.grid,
            shape.block,
            dw.as_mut_ptr(),
            grouped.table().as_ptr(),
            int(grouped.rows()),
            int(grouped.groups()),
            dy.as_ptr(),
            int(d),
        )
    }
}

/// `y[r] = x[r] + w[r mod positions]`, rows of width `d`.
pub fn position_forward(shape: Shape, y: &mut [f32], x: &[f32], w: &[f32], (positions, d): (usize, usize)) {
    let rows = x.len() / d;
    holds(y, rows * d, "y");
    holds(w, positions * d, "w");
    // SAFETY: touches rows x d of y and x, positions x d of w, which they hold.
    unsafe {
        ffi::emu_position_forward(
            shape.grid,
            shape.block,
            y.as_mut_ptr(),
            x.as_ptr(),
            w.as_ptr(),
            int(rows),
            int(positions),
            int(d),
        )
    }
}

/// `dw[t] (+)= Σ_s dy[s, t]` over `sequences` sequences of `positions` rows of width `d`.
pub fn position_backward(
    shape: Shape,
    dw: &mut [f32],
    dy: &[f32],
    (sequences, positions, d): (usize, usize, usize),
    accumulate: bool,
) {
    holds(dw, positions * d, "dw");
    holds(dy, sequences * positions * d, "dy");
    let add = i32::from(accumulate);
    // SAFETY: reads sequences x positions x d of dy and writes positions x d of dw, which they hold.
    unsafe {
        ffi::emu_position_backward(
            shape.grid,
            shape.block,
            dw.as_mut_ptr(),
            dy.as_ptr(),
            int(sequences),
            int(positions),
            int(d),
            add,
        )
    }
}

/// Row `r` of `[rows, t]` scores becomes the causal softmax of `scale ×` its entries.
pub fn causal_softmax(shape: Shape, p: &mut [f32], (rows, t): (usize, usize), scale: f32) {
    holds(p, rows * t, "p");
    // SAFETY: touches rows x t of p, which it holds.
    unsafe { ffi::emu_causal_softmax(shape.grid, shape.block, p.as_mut_ptr(), int(rows), int(t), scale) }
}

/// The scores' gradient from the weights' (`ds`, overwritten) and the weights `p`.
pub fn causal_softmax_backward(shape: Shape, ds: &mut [f32], p: &[f32], (rows, t): (usize, usize), scale: f32) {
    holds(ds, rows * t, "ds");
    holds(p, rows * t, "p");
    // SAFETY: touches rows x t of ds and p, which they hold.
    unsafe {
        ffi::emu_causal_softmax_backward(shape.grid, shape.block, ds.as_mut_ptr(), p.as_ptr(), int(rows), int(t), scale)
    }
}

/// Softmax cross-entropy of `[labels.len(), classes]` logits: each row's loss, and the mean
/// loss's gradient.
pub fn softmax_cross_entropy(
    shape: Shape,
    (loss, dlogits): (&mut [f32], &mut [f32]),
    logits: &[f32],
    labels: &[u32],
    classes: usize,
) {
    let rows = labels.len();
    assert!(labels.iter().all(|&l| (l as usize) < classes), "a label is not below {classes}");
    holds(loss, rows, "loss");
    holds(dlogits, rows * classes, "dlogits");
    holds(logits, rows * classes, "logits");
    // SAFETY: touches rows of loss and labels and rows x classes of the logits and their
    // gradient, which they hold; every label indexes a class (checked).
    unsafe {
        ffi::emu_softmax_cross_entropy(
            shape.grid,
            shape.block,
            loss.as_mut_ptr(),
            dlogits.as_mut_ptr(),
            logits.as_ptr(),
            labels.as_ptr(),
            int(rows),
            int(classes),
        )
    }
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

/// One SGD update of `value` from `grad`, as `cuda::sgd_update` launches it.
pub fn sgd_update(
    shape: Shape,
    rule: SgdRule,
    (value, momentum_buffer): (&mut [f32], &mut [f32]),
    grad: &[f32],
    first: bool,
    grad_scale: f32,
) {
    let n = value.len();
    holds(momentum_buffer, n, "momentum buffer");
    holds(grad, n, "grad");
    // SAFETY: touches n elements of each, which all hold.
    unsafe {
        ffi::emu_sgd_update(
            shape.grid,
            shape.block,
            value.as_mut_ptr(),
            momentum_buffer.as_mut_ptr(),
            grad.as_ptr(),
            int(n),
            rule.lr,
            rule.momentum,
            rule.kept,
            rule.weight_decay,
            i32::from(rule.nesterov),
            i32::from(first),
            grad_scale,
        )
    }
}

/// One AdamW update, with the step's coefficients as `cuda::adamw_update` passes them
/// (the reciprocal of the bias correction taken in f32, as PyTorch's CUDA division does).
pub fn adamw_update(
    shape: Shape,
    step: AdamWStep,
    (value, exp_avg, exp_avg_sq): (&mut [f32], &mut [f32], &mut [f32]),
    grad: &[f32],
    grad_scale: f32,
) {
    let n = value.len();
    holds(exp_avg, n, "exp_avg");
    holds(exp_avg_sq, n, "exp_avg_sq");
    holds(grad, n, "grad");
    let inv_bias_correction2_sqrt = 1.0 / step.bias_correction2_sqrt;
    // SAFETY: touches n elements of each, which all hold.
    unsafe {
        ffi::emu_adamw_update(
            shape.grid,
            shape.block,
            value.as_mut_ptr(),
            exp_avg.as_mut_ptr(),
            exp_avg_sq.as_mut_ptr(),
            grad.as_ptr(),
            int(n),
            step.decay,
            step.lerp_weight,
            step.beta2,
            step.one_minus_beta2,
            inv_bias_correction2_sqrt,
            step.eps,
            step.neg_step_size,
            grad_scale,
        )
    }
}

/// The squares of `x` summed in f64 into one partial sum per block.
pub fn sum_squares(shape: Shape, x: &[f32], partials: &mut [f64]) {
    assert_eq!(shape.block, 256, "sum_squares' shared array holds 256 threads' sums");
    holds(partials, shape.grid as usize, "partials");
    // SAFETY: reads n elements of x and writes one partial per block, which partials holds.
    unsafe { ffi::emu_sum_squares(shape.grid, shape.block, x.as_ptr(), int(x.len()), partials.as_mut_ptr()) }
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
