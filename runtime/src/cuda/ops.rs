//! The device operations of one layer step, queued on the compute stream: cuBLAS products in
//! row-major layout (`products`: how each is handed to column-major cuBLAS) and the NVRTC
//! kernels. Nothing here waits for the GPU.

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaView, CudaViewMut, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};

use super::gpu::{cuda, Gpu};
use super::storage::GpuTokenRows;
use crate::error::{Error, Result};
use crate::layer::{DeviceOp, DropoutDraw};

pub use super::launch_shapes::CLIP_BLOCKS;
use super::launch_shapes::{self, Shape};
use super::products::{self, ColumnMajor, HeadProduct, RowMajor};

fn config(shape: Shape) -> LaunchConfig {
    LaunchConfig { grid_dim: (shape.grid, 1, 1), block_dim: (shape.block, 1, 1), shared_mem_bytes: 0 }
}

/// Enough blocks for `n` elements (`launch_shapes::elementwise`).
pub(super) fn elementwise(n: usize) -> LaunchConfig {
    config(launch_shapes::elementwise(n))
}

/// One block per tile of columns (`launch_shapes::column_tiles`).
fn column_tiles(cols: usize) -> LaunchConfig {
    config(launch_shapes::column_tiles(cols))
}

/// One block per row (`launch_shapes::per_row`).
pub(super) fn per_row(rows: usize) -> LaunchConfig {
    config(launch_shapes::per_row(rows))
}

/// A size as the kernels' `int`; the macro refuses tensors of more than `MAX_TENSOR_NUMEL`
/// (`i32::MAX`) elements, and batches are checked when the model is placed on the GPU.
pub(super) fn int(n: usize) -> i32 {
    i32::try_from(n).expect("tensor sizes were checked to fit an int")
}

pub(super) fn launch(
    what: &'static str,
    result: std::result::Result<Option<impl Sized>, cudarc::driver::DriverError>,
) -> Result<()> {
    result.map(|_| ()).map_err(cuda(what))
}

/// cuBLAS's arguments for `p`: `C = op(first)·op(second) + beta·C`.
fn gemm_config(p: ColumnMajor, beta: f32) -> GemmConfig<f32> {
    let op = |t| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
    GemmConfig {
        transa: op(p.transa),
        transb: op(p.transb),
        m: int(p.m),
        n: int(p.n),
        k: int(p.k),
        alpha: 1.0f32,
        lda: int(p.lda),
        ldb: int(p.ldb),
        beta,
        ldc: int(p.ldc),
    }
}

/// One cuBLAS product (`products::ColumnMajor`) on the compute stream: `C = op(first)·op(second)
/// + beta·C`.
fn sgemm<A: DevicePtr<f32>, B: DevicePtr<f32>, C: DevicePtrMut<f32>>(
    gpu: &Gpu,
    p: ColumnMajor,
    (first, second): (&A, &B),
    beta: f32,
    c: &mut C,
) -> Result<()> {
    let cfg = gemm_config(p, beta);
    // SAFETY: every caller passes buffers holding at least the elements the shapes and leading
    // dimensions address (checked in `product`), all on this GPU.
    unsafe { gpu.blas().gemm(cfg, first, second, c) }.map_err(|e| Error::Cuda(format!("cuBLAS sgemm: {e:?}")))
}

/// The row-major product `p` of `a` and `b` into `c` (see `products`), its views' lengths
/// checked against what the shapes and row strides address.
pub fn product(gpu: &Gpu, p: RowMajor, (a, b): (&In, &In), beta: f32, c: Out) -> Result<()> {
    let (a_needs, b_needs, c_needs) = p.needs_elements();
    assert!(
        a.len() >= a_needs && b.len() >= b_needs && c.len() >= c_needs,
        "product: a view is shorter than its shape and row stride address"
    );
    sgemm(gpu, p.column_major(), (b, a), beta, c)
}

/// One head's products over every sequence (`products::HeadProduct`), one strided-batched
/// cuBLAS call, `C = op(A)·op(B)`; `a`, `b` and `c` start at the first sequence's operands.
pub fn head_product(gpu: &Gpu, p: HeadProduct, (a, b): (&In, &In), c: Out) -> Result<()> {
    let (a_needs, b_needs, c_needs) = p.needs_elements();
    assert!(
        a.len() >= a_needs && b.len() >= b_needs && c.len() >= c_needs,
        "head product: a view is shorter than its sequences, shape and row stride address"
    );
    let stride = |n: usize| i64::try_from(n).expect("tensor sizes were checked to fit an int");
    // cuBLAS's first operand is the row-major product's `B` (see `products`).
    let cfg = StridedBatchedConfig {
        gemm: gemm_config(p.product.column_major(), 0.0),
        batch_size: int(p.sequences),
        stride_a: stride(p.stride.1),
        stride_b: stride(p.stride.0),
        stride_c: stride(p.stride.2),
    };
    // SAFETY: `a`, `b` and `c` hold every sequence's operands (checked above), all on this GPU;
    // the sequences' `C`s do not overlap (each is its own sequence's rows or scores).
    unsafe { gpu.blas().gemm_strided_batched(cfg, b, a, c) }
        .map_err(|e| Error::Cuda(format!("cuBLAS strided-batched sgemm: {e:?}")))
}

/// Views of one layer's tensors on the device; every view holds at least the elements its
/// shape needs (checked where the views are made, in `cuda::program`).
pub(super) type In<'a> = CudaView<'a, f32>;
pub(super) type Out<'a, 'b> = &'a mut CudaViewMut<'b, f32>;

/// `y = x·Wᵀ`: `x` is `[rows, input]`, `w` is `[output, input]`, `y` is `[rows, output]` (a
/// head tied to an embedding table).
pub fn project(gpu: &Gpu, (input, output, rows): (usize, usize, usize), x: In, w: In, y: Out) -> Result<()> {
    product(gpu, products::projection(input, output, rows), (&x, &w), 0.0, y)
}

/// Gradients of `project`: `dW = dyᵀ·x + beta·dW` and, when asked, `dx = dy·W`.
pub fn project_backward(
    gpu: &Gpu,
    (input, output, rows): (usize, usize, usize),
    (x, w, dy): (In, In, In),
    (dw, beta): (Out, f32),
    dx: Option<Out>,
) -> Result<()> {
    product(gpu, products::weight_gradient(input, output, rows), (&dy, &x), beta, dw)?;
    if let Some(dx) = dx {
        product(gpu, products::input_gradient(input, output, rows), (&dy, &w), 0.0, dx)?;
    }
    Ok(())
}

/// `y = x·Wᵀ + b`: `x` is `[rows, input]`, `w` is `[output, input]`, `y` is `[rows, output]`.
pub fn linear_forward(
    gpu: &Gpu,
    (input, output, rows): (usize, usize, usize),
    x: In,
    w: In,
    b: In,
    y: Out,
) -> Result<()> {
    project(gpu, (input, output, rows), x, w, y)?;
    let (rows_, cols) = (int(rows), int(output));
    let mut args = gpu.compute().launch_builder(gpu.kernel("bias_add_rows"));
    args.arg(y).arg(&b).arg(&rows_).arg(&cols);
    // SAFETY: bias_add_rows(float* y, const float* bias, int rows, int cols) touches `rows * cols`
    // elements of y and `cols` of bias, which exist (see `In`).
    launch("bias_add_rows", unsafe { args.launch(elementwise(rows * output)) })
}

/// Gradients of `linear_forward`: `dW (+)= dyᵀ·x`, `db (+)= column sums of dy`, and, when asked,
/// `dx = dy·W`.
#[allow(clippy::too_many_arguments)]
pub fn linear_backward(
    gpu: &Gpu,
    (input, output, rows): (usize, usize, usize),
    (x, w, dy): (In, In, In),
    (dw, db): (Out, Out),
    accumulate: bool,
    dx: Option<Out>,
) -> Result<()> {
    let (rows_, cols, add) = (int(rows), int(output), i32::from(accumulate));
    let mut args = gpu.compute().launch_builder(gpu.kernel("bias_grad"));
    args.arg(db).arg(&dy).arg(&rows_).arg(&cols).arg(&add);
    // SAFETY: bias_grad(float* dbias, const float* dy, int rows, int cols, int accumulate) reads
    // `rows * cols` elements of dy and writes `cols` of dbias, which exist; blocks of THREADS (at
    // most the kernel's 1024 shared sums).
    launch("bias_grad", unsafe { args.launch(column_tiles(output)) })?;
    let beta = if accumulate { 1.0 } else { 0.0 };
    project_backward(gpu, (input, output, rows), (x, w, dy), (dw, beta), dx)
}

/// The forward and backward kernel names of an element-wise layer, and whether its backward
/// reads the layer's output (tanh, sigmoid) rather than its input (ReLU, GELU).
fn activation(op: DeviceOp) -> (&'static str, &'static str, bool) {
    match op {
        DeviceOp::Relu => ("relu_forward", "relu_backward", false),
        DeviceOp::Gelu => ("gelu_forward", "gelu_backward", false),
        DeviceOp::Tanh => ("tanh_forward", "tanh_backward", true),
        DeviceOp::Sigmoid => ("sigmoid_forward", "sigmoid_backward", true),
        other => panic!("{other:?} is not an element-wise layer"),
    }
}

/// `y = f(x)` over `n` elements.
pub fn activation_forward(gpu: &Gpu, op: DeviceOp, n: usize, x: In, y: Out) -> Result<()> {
    let (forward, _, _) = activation(op);
    let n_ = int(n);
    let mut args = gpu.compute().launch_builder(gpu.kernel(forward));
    args.arg(y).arg(&x).arg(&n_);
    // SAFETY: the element-wise forward kernels (float* y, const float* x, int n) touch `n`
    // elements of each, which exist.
    launch(forward, unsafe { args.launch(elementwise(n)) })
}

/// `dx = f'(·) ∘ dy` over `n` elements, from the layer's input `x` and output `y`.
pub fn activation_backward(gpu: &Gpu, op: DeviceOp, n: usize, (x, y, dy): (In, In, In), dx: Out) -> Result<()> {
    let (_, backward, from_output) = activation(op);
    let n_ = int(n);
    let mut args = gpu.compute().launch_builder(gpu.kernel(backward));
    args.arg(dx).arg(if from_output { &y } else { &x }).arg(&dy).arg(&n_);
    // SAFETY: the element-wise backward kernels (float* dx, const float* x_or_y, const float* dy,
    // int n) touch `n` elements of each, which exist.
    launch(backward, unsafe { args.launch(elementwise(n)) })
}

/// `y = x ∘ mask · scale` over a `[rows, cols]` tensor, the mask `draw`'s (forward passes the
/// layer's input and output, backward its output's gradient and its input's).
pub fn dropout(gpu: &Gpu, (rows, cols): (usize, usize), draw: DropoutDraw, x: In, y: Out) -> Result<()> {
    let (rows_, cols_) = (int(rows), int(cols));
    let (threshold, scale, stream, first_row) = (draw.threshold(), draw.scale(), draw.stream(), draw.first_row());
    let mut args = gpu.compute().launch_builder(gpu.kernel("dropout"));
    args.arg(y).arg(&x).arg(&rows_).arg(&cols_).arg(&threshold).arg(&scale).arg(&stream).arg(&first_row);
    // SAFETY: dropout(float* y, const float* x, int rows, int cols, unsigned int threshold, float
    // scale, unsigned long long stream, unsigned long long first_row) touches `rows * cols`
    // elements of each tensor, which exist.
    launch("dropout", unsafe { args.launch(elementwise(rows * cols)) })
}

/// `x = x ∘ mask · scale` in place (attention's weight gradients, masked as the weights were).
pub fn dropout_in_place(gpu: &Gpu, (rows, cols): (usize, usize), draw: DropoutDraw, x: Out) -> Result<()> {
    let (rows_, cols_) = (int(rows), int(cols));
    let (threshold, scale, stream, first_row) = (draw.threshold(), draw.scale(), draw.stream(), draw.first_row());
    let mut args = gpu.compute().launch_builder(gpu.kernel("dropout_in_place"));
    args.arg(x).arg(&rows_).arg(&cols_).arg(&threshold).arg(&scale).arg(&stream).arg(&first_row);
    // SAFETY: dropout_in_place(float* x, int rows, int cols, unsigned int threshold, float scale,
    // unsigned long long stream, unsigned long long first_row) touches `rows * cols` elements of
    // x, which exist.
    launch("dropout_in_place", unsafe { args.launch(elementwise(rows * cols)) })
}

/// The squares of `x`'s `n` elements summed in f64 into `CLIP_BLOCKS` partial sums.
pub fn sum_squares(gpu: &Gpu, n: usize, x: In, partials: &mut CudaViewMut<f64>) -> Result<()> {
    let n_ = int(n);
    let mut args = gpu.compute().launch_builder(gpu.kernel("sum_squares"));
    args.arg(&x).arg(&n_).arg(partials);
    // SAFETY: sum_squares(const float* x, int n, double* partials) reads `n` elements of x and
    // writes one partial per block, CLIP_BLOCKS, which `partials` holds (checked by the caller);
    // its shared array is sized for THREADS = 256 threads.
    launch("sum_squares", unsafe { args.launch(config(launch_shapes::clip())) })
}

/// `y = a + b` over `n` elements (a residual block's output).
pub fn add(gpu: &Gpu, n: usize, (a, b): (In, In), y: Out) -> Result<()> {
    let n_ = int(n);
    let mut args = gpu.compute().launch_builder(gpu.kernel("add"));
    args.arg(y).arg(&a).arg(&b).arg(&n_);
    // SAFETY: add(float* y, const float* a, const float* b, int n) touches `n` elements of each,
    // which exist (the tensors are sized to the same shape).
    launch("add", unsafe { args.launch(elementwise(n)) })
}

/// `y += a` over `n` elements (a residual block's skip gradient).
pub fn add_into(gpu: &Gpu, n: usize, a: In, y: Out) -> Result<()> {
    let n_ = int(n);
    let mut args = gpu.compute().launch_builder(gpu.kernel("add_into"));
    args.arg(y).arg(&a).arg(&n_);
    // SAFETY: add_into(float* y, const float* a, int n) touches `n` elements of each, which exist.
    launch("add_into", unsafe { args.launch(elementwise(n)) })
}

/// `y[r] = w[ids[r]]`: `rows` token ids (integral floats below the table's rows) into rows of
/// width `d`.
pub fn embedding_forward(gpu: &Gpu, (rows, d): (usize, usize), ids: In, w: In, y: Out) -> Result<()> {
    let (rows_, d_) = (int(rows), int(d));
    let mut args = gpu.compute().launch_builder(gpu.kernel("embedding_forward"));
    args.arg(y).arg(&ids).arg(&w).arg(&rows_).arg(&d_);
    // SAFETY: writes `rows * d` elements of y, reads `rows` ids and the rows of w they name,
    // which exist (the ids were checked against the table's size on the host).
    launch("embedding_forward", unsafe { args.launch(elementwise(rows * d)) })
}

/// `dw[ids[r]] (+)= dy[r]`, the table's gradient zeroed first unless `accumulate`; the rows of
/// width `d` come grouped by token (`GpuTokenRows`), each token's added in the order of the rows.
pub fn embedding_backward(gpu: &Gpu, d: usize, tokens: &GpuTokenRows, dy: In, dw: Out, accumulate: bool) -> Result<()> {
    if !accumulate {
        gpu.compute().memset_zeros(dw).map_err(cuda("clearing an embedding gradient"))?;
    }
    let (table, rows, groups) = tokens.view();
    let (rows_, groups_, d_) = (int(rows), int(groups), int(d));
    let mut args = gpu.compute().launch_builder(gpu.kernel("embedding_backward"));
    args.arg(dw).arg(&table).arg(&rows_).arg(&groups_).arg(&dy).arg(&d_);
    // SAFETY: the table holds `rows + 2 * groups + 1` entries (`TokenRows`): rows below `rows`,
    // whose `d` gradients dy holds, and tokens whose rows of dw exist (the ids were checked on
    // the host against the table's size, and the caller checked that the grouping is of this
    // table and these rows: `GpuTensor::token_rows_for`).
    launch("embedding_backward", unsafe { args.launch(per_row(groups)) })
}

/// `y[r] = x[r] + w[r mod positions]` over `rows` rows of width `d`.
pub fn position_forward(gpu: &Gpu, (rows, positions, d): (usize, usize, usize), x: In, w: In, y: Out) -> Result<()> {
    let (rows_, positions_, d_) = (int(rows), int(positions), int(d));
    let mut args = gpu.compute().launch_builder(gpu.kernel("position_forward"));
    args.arg(y).arg(&x).arg(&w).arg(&rows_).arg(&positions_).arg(&d_);
    // SAFETY: touches `rows * d` elements of y and x and `positions * d` of w (positions at most
    // the table's rows, checked before), which exist.
    launch("position_forward", unsafe { args.launch(elementwise(rows * d)) })
}

/// `dw[t] (+)= Σ_s dy[s, t]` over `sequences` sequences of `positions` rows of width `d`. Not
/// accumulating, the whole table's gradient is zeroed first: the rows past `positions` (a step
/// of shorter sequences) must not keep an earlier step's values.
pub fn position_backward(
    gpu: &Gpu,
    (sequences, positions, d): (usize, usize, usize),
    dy: In,
    dw: Out,
    accumulate: bool,
) -> Result<()> {
    if !accumulate {
        gpu.compute().memset_zeros(dw).map_err(cuda("clearing a position-embedding gradient"))?;
    }
    let (s_, p_, d_, add) = (int(sequences), int(positions), int(d), 1i32);
    let mut args = gpu.compute().launch_builder(gpu.kernel("position_backward"));
    args.arg(dw).arg(&dy).arg(&s_).arg(&p_).arg(&d_).arg(&add);
    // SAFETY: reads `sequences * positions * d` gradients and writes `positions * d` elements of
    // dw, which exist.
    launch("position_backward", unsafe { args.launch(elementwise(positions * d)) })
}

/// Row `r` of the `[rows, t]` scores becomes the softmax of `scale ×` its first `r mod t + 1`
/// entries, the rest zero (attention to the same and earlier positions).
pub fn causal_softmax(gpu: &Gpu, (rows, t): (usize, usize), scale: f32, p: Out) -> Result<()> {
    let (rows_, t_) = (int(rows), int(t));
    let mut args = gpu.compute().launch_builder(gpu.kernel("causal_softmax"));
    args.arg(p).arg(&rows_).arg(&t_).arg(&scale);
    // SAFETY: touches `rows * t` elements of p, which exist; one block per row of THREADS (a
    // power of two, at most the kernel's 1024-entry scratch).
    launch("causal_softmax", unsafe { args.launch(per_row(rows)) })
}

/// The scores' gradient from the weights' (`ds`, overwritten) and the weights `p`.
pub fn causal_softmax_backward(gpu: &Gpu, (rows, t): (usize, usize), scale: f32, p: In, ds: Out) -> Result<()> {
    let (rows_, t_) = (int(rows), int(t));
    let mut args = gpu.compute().launch_builder(gpu.kernel("causal_softmax_backward"));
    args.arg(ds).arg(&p).arg(&rows_).arg(&t_).arg(&scale);
    // SAFETY: touches `rows * t` elements of ds and p, which exist; one block per row.
    launch("causal_softmax_backward", unsafe { args.launch(per_row(rows)) })
}

/// Per-row statistics LayerNorm saves for backward.
pub struct RowStats<'a, 'b> {
    /// Each row's mean (`rows` values).
    pub mean: Out<'a, 'b>,
    /// Each row's `1 / sqrt(variance + eps)` (`rows` values).
    pub rstd: Out<'a, 'b>,
}

/// LayerNorm over `d` features of `rows` rows, saving each row's mean and 1/std.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_forward(
    gpu: &Gpu,
    (d, rows): (usize, usize),
    x: In,
    (gamma, beta): (In, In),
    y: Out,
    stats: RowStats,
) -> Result<()> {
    let (rows_, d_) = (int(rows), int(d));
    let mut args = gpu.compute().launch_builder(gpu.kernel("layer_norm_forward"));
    args.arg(y).arg(stats.mean).arg(stats.rstd).arg(&x).arg(&gamma).arg(&beta).arg(&rows_).arg(&d_);
    // SAFETY: layer_norm_forward touches `rows * d` elements of y and x, `rows` of mean and rstd
    // and `d` of gamma and beta, which exist; one block per row of THREADS (a power of two).
    launch("layer_norm_forward", unsafe { args.launch(per_row(rows)) })
}

/// LayerNorm's gradients: `dgamma`, `dbeta` (added to when `accumulate`) and, when asked, `dx`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward(
    gpu: &Gpu,
    (d, rows): (usize, usize),
    (x, dy, gamma): (In, In, In),
    (mean, rstd): (In, In),
    (dgamma, dbeta): (Out, Out),
    accumulate: bool,
    dx: Option<Out>,
) -> Result<()> {
    let (rows_, d_, add) = (int(rows), int(d), i32::from(accumulate));
    let mut args = gpu.compute().launch_builder(gpu.kernel("layer_norm_backward_params"));
    args.arg(dgamma).arg(dbeta).arg(&x).arg(&dy).arg(&mean).arg(&rstd).arg(&rows_).arg(&d_).arg(&add);
    // SAFETY: reads `rows * d` elements of x and dy and `rows` of mean and rstd; writes `d` of
    // dgamma and dbeta; all exist. Blocks of THREADS (at most the kernel's 1024 shared sums).
    launch("layer_norm_backward_params", unsafe { args.launch(column_tiles(d)) })?;
    if let Some(dx) = dx {
        let mut args = gpu.compute().launch_builder(gpu.kernel("layer_norm_backward_input"));
        args.arg(dx).arg(&x).arg(&dy).arg(&gamma).arg(&mean).arg(&rstd).arg(&rows_).arg(&d_);
        // SAFETY: as above, one block per row of THREADS (a power of two).
        launch("layer_norm_backward_input", unsafe { args.launch(per_row(rows)) })?;
    }
    Ok(())
}
