//! The program's values on a GPU (`Cuda`, a `program::Storage`): activations as `GpuTensor`s
//! that grow to the step's size once, LayerNorm's row statistics, gradient buckets as single
//! device buffers (what NCCL sums), and an in-flight bucket as a ticket whose handle the
//! executor keeps.

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

use super::gpu::{cuda, Gpu};
use super::token_rows::TokenRows;
use crate::error::{Error, Result};
use crate::layer::{DeviceOp, Layer};
use crate::model::DistributedModel;
use crate::program::Storage;
use crate::tensor::Matrix;

/// Tensors in one GPU's memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cuda;

/// A `rows × cols` matrix on the GPU, row-major; its buffer only grows. A batch of token ids
/// goes in with its rows grouped by token (`upload_tokens`), for the embedding's backward; any
/// later write drops the grouping.
#[derive(Default)]
pub struct GpuTensor {
    data: Option<CudaSlice<f32>>,
    rows: usize,
    cols: usize,
    tokens: GpuTokenRows,
    grouped: bool,
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
        self.grouped = false;
        Ok(())
    }

    /// The `rows × cols` elements.
    pub fn view(&self) -> CudaView<'_, f32> {
        let data = self.data.as_ref().expect("a tensor is written before it is read");
        data.slice(..self.rows * self.cols)
    }

    /// The `rows × cols` elements, mutably.
    pub fn view_mut(&mut self) -> CudaViewMut<'_, f32> {
        self.grouped = false;
        let n = self.rows * self.cols;
        self.data.as_mut().expect("a tensor is sized before it is written").slice_mut(..n)
    }

    /// Copies `host` in (token ids for a model that opens with an embedding go in with
    /// `upload_tokens`, which its backward needs).
    pub fn upload(&mut self, gpu: &Gpu, host: &Matrix) -> Result<()> {
        self.resize(gpu, host.rows(), host.cols())?;
        gpu.compute().memcpy_htod(host.as_slice(), &mut self.view_mut()).map_err(cuda("copying a batch in"))
    }

    /// Copies in a batch's inputs as `M`'s first layer reads them: token ids with their rows
    /// grouped by token (`upload_tokens`, which checks them) for a model that opens with an
    /// embedding, values as they are otherwise.
    pub fn upload_batch<M: DistributedModel>(&mut self, gpu: &Gpu, host: &Matrix) -> Result<()> {
        match M::DEVICE_OPS.first() {
            Some(DeviceOp::Embedding { vocab, .. }) => self.upload_tokens(gpu, host, *vocab),
            _ => self.upload(gpu, host),
        }
    }

    /// Copies in `host`'s token ids for an embedding of `vocab` rows, with their rows grouped by
    /// token (what the embedding's backward reads): one id per row, each an integral float below
    /// `vocab`, or an error naming the first that is not.
    pub fn upload_tokens(&mut self, gpu: &Gpu, host: &Matrix, vocab: usize) -> Result<()> {
        crate::layer::check_token_ids(host, vocab)?;
        self.upload(gpu, host)?;
        self.tokens.upload(gpu, host.as_slice(), vocab)?;
        self.grouped = true;
        Ok(())
    }

    /// The rows grouped by token for the embedding `embedding` of `vocab` rows reading `rows` ids:
    /// an error unless this holds ids `upload_tokens` copied in for such a table.
    pub(super) fn token_rows_for(&self, embedding: &str, vocab: usize, rows: usize) -> Result<&GpuTokenRows> {
        match self.grouped.then_some(&self.tokens) {
            Some(tokens) if tokens.vocab == vocab && tokens.host.rows() == rows => Ok(tokens),
            Some(tokens) => Err(Error::Cuda(format!(
                "the embedding `{embedding}` of {vocab} rows reads {rows} token ids, but they went in as {} ids for a \
                 table of {}",
                tokens.host.rows(),
                tokens.vocab
            ))),
            None => Err(Error::Cuda(format!(
                "the embedding `{embedding}` reads token ids that went in without their rows grouped by token: upload \
                 them with `GpuTensor::upload_tokens`"
            ))),
        }
    }

    /// Copies in `from`'s values, and its rows grouped by token when it has them.
    pub fn copy_from(&mut self, gpu: &Gpu, from: &GpuTensor) -> Result<()> {
        self.resize(gpu, from.rows(), from.cols())?;
        gpu.compute().memcpy_dtod(&from.view(), &mut self.view_mut()).map_err(cuda("copying the input"))?;
        if from.grouped {
            self.tokens.copy_from(gpu, &from.tokens)?;
            self.grouped = true;
        }
        Ok(())
    }
}

/// A batch's rows grouped by token (`TokenRows`), for the embedding's backward: grouped on the
/// host as the batch goes in, copied in next to it.
#[derive(Default)]
pub struct GpuTokenRows {
    host: TokenRows,
    /// The rows of the table the ids were checked against.
    vocab: usize,
    device: Option<CudaSlice<i32>>,
}

impl GpuTokenRows {
    /// Groups the batch's token `ids` (checked below `vocab`) and copies the table in, queued
    /// after the kernels that read the previous batch's.
    fn upload(&mut self, gpu: &Gpu, ids: &[f32], vocab: usize) -> Result<()> {
        self.host.group(ids, vocab);
        self.vocab = vocab;
        self.device_holding(gpu, self.host.table().len())?;
        let table = self.host.table();
        let device = self.device.as_mut().expect("allocated above");
        gpu.compute().memcpy_htod(table, &mut device.slice_mut(..table.len())).map_err(cuda("copying token rows in"))
    }

    /// Copies `from`'s grouping, on the host and on the GPU.
    fn copy_from(&mut self, gpu: &Gpu, from: &GpuTokenRows) -> Result<()> {
        self.host.clone_from(&from.host);
        self.vocab = from.vocab;
        let (table, ..) = from.view();
        self.device_holding(gpu, table.len())?;
        let device = self.device.as_mut().expect("allocated above");
        gpu.compute().memcpy_dtod(&table, &mut device.slice_mut(..table.len())).map_err(cuda("copying token rows"))
    }

    /// Makes the device buffer hold at least `n` entries (its contents then undefined).
    fn device_holding(&mut self, gpu: &Gpu, n: usize) -> Result<()> {
        if self.device.as_ref().is_none_or(|d| d.len() < n) {
            self.device = Some(gpu.compute().alloc_zeros::<i32>(n).map_err(cuda("allocating a batch's token rows"))?);
        }
        Ok(())
    }

    /// The table on the GPU, its rows and its tokens.
    pub fn view(&self) -> (CudaView<'_, i32>, usize, usize) {
        let device = self.device.as_ref().expect("a batch of tokens goes in before an embedding's backward");
        (device.slice(..self.host.table().len()), self.host.rows(), self.host.groups())
    }
}

/// What a layer keeps from forward on the GPU: LayerNorm's per-row mean and 1/std; attention's
/// queries, keys and values, weights and heads' outputs.
#[derive(Default)]
pub struct GpuSaved {
    pub(super) stats: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    pub(super) attention: Option<AttentionBuffers>,
}

/// `[rows, 3D]` queries, keys and values, `[sequences, heads, t, t]` weights, `[rows, D]` heads;
/// and the weights after dropout, on steps that drop (allocated by the first).
pub(super) struct AttentionBuffers {
    pub(super) qkv: CudaSlice<f32>,
    pub(super) probs: CudaSlice<f32>,
    pub(super) heads: CudaSlice<f32>,
    pub(super) dropped: Option<CudaSlice<f32>>,
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
