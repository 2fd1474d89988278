//! The program's values on a GPU (`Cuda`, a `program::Storage`): activations as `GpuTensor`s
//! that grow to the step's size once, LayerNorm's row statistics, gradient buckets as single
//! device buffers (what NCCL sums), and an in-flight bucket as a ticket whose handle the
//! executor keeps.

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

use super::gpu::{cuda, Gpu};
use crate::error::{Error, Result};
use crate::layer::Layer;
use crate::program::Storage;
use crate::tensor::Matrix;

/// Tensors in one GPU's memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cuda;

/// A `rows × cols` matrix on the GPU, row-major; its buffer only grows.
#[derive(Default)]
pub struct GpuTensor {
    data: Option<CudaSlice<f32>>,
    rows: usize,
    cols: usize,
}

impl GpuTensor {
    /// Its rows, as last sized (the buffer may hold more).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Its columns, as last sized.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Makes this `rows × cols`, reallocating (uninitialised contents) only to grow.
    pub fn resize(&mut self, gpu: &Gpu, rows: usize, cols: usize) -> Result<()> {
        let n = rows.checked_mul(cols).filter(|&n| n <= i32::MAX as usize).ok_or_else(|| {
            Error::Config(format!(
                "a {rows} x {cols} activation is too large for the GPU kernels (at most 2^31 - 1 elements)"
            ))
        })?;
        if self.data.as_ref().is_none_or(|d| d.len() < n) {
            self.data = Some(gpu.compute().alloc_zeros::<f32>(n.max(1)).map_err(cuda("allocating an activation"))?);
        }
        (self.rows, self.cols) = (rows, cols);
        Ok(())
    }

    /// The `rows × cols` elements.
    pub fn view(&self) -> CudaView<'_, f32> {
        let data = self.data.as_ref().expect("a tensor is written before it is read");
        data.slice(..self.rows * self.cols)
    }

    /// The `rows × cols` elements, mutably.
    pub fn view_mut(&mut self) -> CudaViewMut<'_, f32> {
        let n = self.rows * self.cols;
        self.data.as_mut().expect("a tensor is sized before it is written").slice_mut(..n)
    }

    /// Copies `host` in.
    pub fn upload(&mut self, gpu: &Gpu, host: &Matrix) -> Result<()> {
        self.resize(gpu, host.rows(), host.cols())?;
        gpu.compute().memcpy_htod(host.as_slice(), &mut self.view_mut()).map_err(cuda("copying a batch in"))
    }
}

/// What a layer keeps from forward on the GPU: LayerNorm's per-row mean and 1/std; attention's
/// queries, keys and values, weights and heads' outputs.
#[derive(Default)]
pub struct GpuSaved {
    pub(super) stats: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    pub(super) attention: Option<AttentionBuffers>,
}

/// `[rows, 3D]` queries, keys and values, `[sequences, heads, t, t]` weights, `[rows, D]` heads.
pub(super) struct AttentionBuffers {
    pub(super) qkv: CudaSlice<f32>,
    pub(super) probs: CudaSlice<f32>,
    pub(super) heads: CudaSlice<f32>,
}

/// `buffer` holding at least `n` elements: kept, or replaced by a larger one.
pub(super) fn at_least(gpu: &Gpu, buffer: &mut Option<CudaSlice<f32>>, n: usize) -> Result<()> {
    if buffer.as_ref().is_none_or(|b| b.len() < n) {
        *buffer = Some(gpu.compute().alloc_zeros::<f32>(n.max(1)).map_err(cuda("allocating a work buffer"))?);
    }
    Ok(())
}

/// A bucket being summed: its handle stays with the executor, which the wait point asks for it.
#[must_use = "an in-flight bucket must be waited on before its gradients can be used"]
#[derive(Debug)]
pub struct GpuTicket {
    pub(super) bucket: usize,
}

/// PowerSGD does not run on the GPU (refused before a step), so its stages cannot exist there.
pub enum NoLowRank {}

impl Storage for Cuda {
    type Tensor = GpuTensor;
    type Saved<L: Layer> = GpuSaved;
    type Bucket = CudaSlice<f32>;
    type GradView<'a> = CudaViewMut<'a, f32>;
    type InFlight = GpuTicket;
    type LowRankP = NoLowRank;
    type LowRankQ = NoLowRank;
    type Error = Error;

    fn views_mut<const N: usize>(
        bucket: &mut CudaSlice<f32>,
        ranges: [(usize, usize); N],
    ) -> [CudaViewMut<'_, f32>; N] {
        let mut rest = Some(bucket.as_view_mut());
        let mut consumed = 0;
        ranges.map(|(offset, len)| {
            assert!(offset >= consumed, "gradient views are made in increasing offset, without overlap");
            let whole = rest.take().expect("one view at a time");
            let (_, tail) = split_off(whole, offset - consumed);
            let (view, tail) = split_off(tail, len);
            rest = Some(tail);
            consumed = offset + len;
            view
        })
    }
}

/// `view` split at `mid` into two views that keep its lifetime (cudarc's `split_at_mut` ties
/// them to a borrow of `view` instead, which a loop over a bucket's ranges cannot hold).
fn split_off<'a>(mut view: CudaViewMut<'a, f32>, mid: usize) -> (CudaViewMut<'a, f32>, CudaViewMut<'a, f32>) {
    let (low, high) = view.split_at_mut(mid);
    // SAFETY: `low` and `high` are disjoint parts of the memory `view` borrows mutably for 'a,
    // and `view` is consumed here, so that memory is never reached through it again; their
    // other fields (the stream, the read and write events) are shared references into the
    // `CudaSlice` that `view` borrows for 'a. Giving them `view`'s lifetime, as
    // `<[T]>::split_at_mut` does for slices, aliases nothing.
    unsafe {
        std::mem::transmute::<(CudaViewMut<'_, f32>, CudaViewMut<'_, f32>), (CudaViewMut<'a, f32>, CudaViewMut<'a, f32>)>(
            (low, high),
        )
    }
}
