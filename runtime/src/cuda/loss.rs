//! Softmax cross-entropy on the GPU: each row's loss and the gradient of the mean, from the
//! model's output and the batch's labels, without copying anything out.

use cudarc::driver::{CudaSlice, CudaView, PushKernelArg};

use super::gpu::{cuda, Gpu};
use super::ops::{int, launch, per_row, In, Out};
use super::storage::GpuTensor;
use crate::error::{Error, Result};

/// Softmax cross-entropy on the GPU, with its device buffers (labels, per-row losses, gradient)
/// kept from step to step.
#[derive(Default)]
pub struct GpuCrossEntropy {
    labels: Option<CudaSlice<u32>>,
    loss_rows: Option<CudaSlice<f32>>,
    rows: usize,
    /// The gradient of the mean loss with respect to the logits: where backward starts.
    grad: GpuTensor,
}

impl GpuCrossEntropy {
    /// Queues the loss of `logits` (`[rows, classes]`) against `labels` and its gradient.
    pub fn forward_backward(&mut self, gpu: &Gpu, logits: &GpuTensor, labels: &[u32]) -> Result<()> {
        let (rows, classes) = (logits.rows(), logits.cols());
        if labels.len() != rows {
            return Err(Error::Config(format!("{} labels for {rows} rows of logits", labels.len())));
        }
        let stream = gpu.compute();
        if self.labels.as_ref().is_none_or(|l| l.len() < rows) {
            self.labels = Some(stream.alloc_zeros::<u32>(rows.max(1)).map_err(cuda("allocating labels"))?);
            self.loss_rows = Some(stream.alloc_zeros::<f32>(rows.max(1)).map_err(cuda("allocating the loss"))?);
        }
        let (device_labels, loss_rows) =
            (self.labels.as_mut().expect("above"), self.loss_rows.as_mut().expect("above"));
        stream.memcpy_htod(labels, &mut device_labels.slice_mut(..rows)).map_err(cuda("copying the labels in"))?;
        self.grad.resize(gpu, rows, classes)?;
        self.rows = rows;
        cross_entropy(
            gpu,
            (rows, classes),
            logits.view(),
            device_labels.slice(..rows),
            &mut loss_rows.slice_mut(..rows),
            &mut self.grad.view_mut(),
        )
    }

    /// The gradient of the mean loss with respect to the logits.
    pub fn grad(&self) -> &GpuTensor {
        &self.grad
    }

    /// The mean loss of the last `forward_backward` (copies `rows` floats out, waiting for the
    /// GPU: call it only when logging).
    pub fn mean_loss(&self, gpu: &Gpu) -> Result<f64> {
        let Some(loss_rows) = &self.loss_rows else { return Ok(0.0) };
        let rows = gpu.compute().clone_dtoh(&loss_rows.slice(..self.rows)).map_err(cuda("copying the loss out"))?;
        Ok(rows.iter().map(|&l| f64::from(l)).sum::<f64>() / self.rows.max(1) as f64)
    }
}

/// Softmax cross-entropy of `[rows, classes]` logits against `labels`: each row's loss into
/// `loss_rows`, and the gradient of the mean loss into `dlogits`.
pub fn cross_entropy(
    gpu: &Gpu,
    (rows, classes): (usize, usize),
    logits: In,
    labels: CudaView<u32>,
    loss_rows: Out,
    dlogits: Out,
) -> Result<()> {
    let (rows_, classes_) = (int(rows), int(classes));
    let mut args = gpu.compute().launch_builder(gpu.kernel("softmax_cross_entropy"));
    args.arg(loss_rows).arg(dlogits).arg(&logits).arg(&labels).arg(&rows_).arg(&classes_);
    // SAFETY: reads `rows * classes` logits and `rows` labels (each below `classes`, checked by
    // `loss::check_class_labels` before the loss is launched), writes `rows` losses and `rows * classes` gradients; all exist. One block
    // per row of THREADS (a power of two).
    launch("softmax_cross_entropy", unsafe { args.launch(per_row(rows)) })
}
