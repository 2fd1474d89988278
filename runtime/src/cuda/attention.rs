//! Causal self-attention on the GPU: `c_attn` and `c_proj` as linear layers, each head's scores
//! and weighted values as cuBLAS products on strided views inside the `[rows, 3D]` queries, keys
//! and values and the `[rows, D]` heads (no copies; one strided-batched call per head over every
//! sequence), and the causal softmax and its backward as kernels (`kernels/attention.cu`); on a
//! step with dropout, the weights dropped by `Dropout`'s kernel, which draws the host's masks. The
//! same math as `layer::CausalSelfAttention` on the host.

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

use super::gpu::{cuda, Gpu};
use super::ops;
use super::storage::{AttentionBuffers, GpuSaved, GpuTensor};
use crate::error::{Error, Result};
use crate::layer::DropoutDraw;

pub(super) use super::products::Attention;
use super::products::HeadProduct;

/// Queues `p` on the compute stream, its `A` and `B` read from `a` and `b` and `C` written into
/// `c` from the offsets `p` gives.
fn per_head(
    gpu: &Gpu,
    p: HeadProduct,
    (a, b): (&CudaSlice<f32>, &CudaSlice<f32>),
    c: &mut CudaSlice<f32>,
) -> Result<()> {
    ops::head_product(gpu, p, (&a.slice(p.a..), &b.slice(p.b..)), &mut c.slice_mut(p.c..))
}

impl Attention {
    /// `c_attn`, each head's scores, the causal softmax, dropout of the weights when `draw` (the
    /// layer's, `for_weights`) drops, each head's weighted values, `c_proj`.
    pub(super) fn forward(
        &self,
        gpu: &Gpu,
        x: &GpuTensor,
        params: [CudaView<f32>; 4],
        (b, draw): (&mut AttentionBuffers, DropoutDraw),
        y: &mut GpuTensor,
    ) -> Result<()> {
        let (d, t, hd, rows) = (self.width, self.t, self.head(), self.rows());
        let [wa, ba, wp, bp] = params;
        ops::linear_forward(gpu, (d, 3 * d, rows), x.view(), wa, ba, &mut b.qkv.slice_mut(..rows * 3 * d))?;
        for h in 0..self.heads {
            per_head(gpu, self.head_scores(h), (&b.qkv, &b.qkv), &mut b.probs)?;
        }
        let scale = 1.0 / (hd as f32).sqrt();
        let weight_rows = self.sequences * self.heads * t;
        ops::causal_softmax(gpu, (weight_rows, t), scale, &mut b.probs.slice_mut(..self.scores()))?;
        let weighed = match &mut b.dropped {
            Some(dropped) if draw.active() => {
                let probs = b.probs.slice(..self.scores());
                ops::dropout(gpu, (weight_rows, t), draw, probs, &mut dropped.slice_mut(..self.scores()))?;
                &*dropped
            }
            _ => &b.probs,
        };
        for h in 0..self.heads {
            per_head(gpu, self.head_values(h), (weighed, &b.qkv), &mut b.heads)?;
        }
        ops::linear_forward(gpu, (d, d, rows), b.heads.slice(..rows * d), wp, bp, &mut y.view_mut())
    }

    /// `c_proj`'s gradients and the heads'; per head dP = dy·vᵀ and dv = Pᵀ·dy (P as dropped, and
    /// dP masked as P was, when `draw` drops); the softmax's backward; per head dq = dS·k and
    /// dk = dSᵀ·q; `c_attn`'s gradients and the input's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn backward(
        &self,
        gpu: &Gpu,
        (x, dy): (&GpuTensor, &GpuTensor),
        [wa, wp]: [CudaView<f32>; 2],
        (b, draw): (&AttentionBuffers, DropoutDraw),
        (d_heads, d_qkv, ds): (&mut CudaSlice<f32>, &mut CudaSlice<f32>, &mut CudaSlice<f32>),
        [dwa, dba, dwp, dbp]: [&mut CudaViewMut<f32>; 4],
        accumulate: bool,
        dx: Option<&mut CudaViewMut<f32>>,
    ) -> Result<()> {
        let (d, t, hd, rows) = (self.width, self.t, self.head(), self.rows());
        let heads_out = b.heads.slice(..rows * d);
        let d_heads_out = &mut d_heads.slice_mut(..rows * d);
        ops::linear_backward(gpu, (d, d, rows), (heads_out, wp, dy.view()), (dwp, dbp), accumulate, Some(d_heads_out))?;
        let dropped = b.dropped.as_ref().filter(|_| draw.active());
        for h in 0..self.heads {
            per_head(gpu, self.head_weights_gradient(h), (d_heads, &b.qkv), ds)?;
            per_head(gpu, self.head_values_gradient(h), (dropped.unwrap_or(&b.probs), d_heads), d_qkv)?;
        }
        let (scores, probs) = (self.scores(), b.probs.slice(..self.scores()));
        if dropped.is_some() {
            ops::dropout_in_place(gpu, (self.sequences * self.heads * t, t), draw, &mut ds.slice_mut(..scores))?;
        }
        let scale = 1.0 / (hd as f32).sqrt();
        ops::causal_softmax_backward(
            gpu,
            (self.sequences * self.heads * t, t),
            scale,
            probs,
            &mut ds.slice_mut(..scores),
        )?;
        for h in 0..self.heads {
            per_head(gpu, self.head_queries_gradient(h), (ds, &b.qkv), d_qkv)?;
            per_head(gpu, self.head_keys_gradient(h), (ds, &b.qkv), d_qkv)?;
        }
        let d_qkv_in = d_qkv.slice(..rows * 3 * d);
        ops::linear_backward(gpu, (d, 3 * d, rows), (x.view(), wa, d_qkv_in), (dwa, dba), accumulate, dx)
    }
}

/// Attention's buffers for this call's shape, allocated on first use or to grow; the dropped
/// weights' too when `dropping`.
pub(super) fn attention_buffers<'s>(
    gpu: &Gpu,
    saved: &'s mut GpuSaved,
    shape: Attention,
    dropping: bool,
) -> Result<&'s mut AttentionBuffers> {
    let (rows, d) = (shape.rows(), shape.width);
    fits_the_kernels(shape)?;
    let fits = |b: &AttentionBuffers| {
        b.qkv.len() >= rows * 3 * d && b.probs.len() >= shape.scores() && b.heads.len() >= rows * d
    };
    if !saved.attention.as_ref().is_some_and(fits) {
        let alloc =
            |n: usize| gpu.compute().alloc_zeros::<f32>(n.max(1)).map_err(cuda("allocating attention's buffers"));
        saved.attention = Some(AttentionBuffers {
            qkv: alloc(rows * 3 * d)?,
            probs: alloc(shape.scores())?,
            heads: alloc(rows * d)?,
            dropped: None,
        });
    }
    let buffers = saved.attention.as_mut().expect("allocated above");
    if dropping && buffers.dropped.as_ref().is_none_or(|d| d.len() < shape.scores()) {
        let dropped = gpu.compute().alloc_zeros::<f32>(shape.scores().max(1));
        buffers.dropped = Some(dropped.map_err(cuda("allocating attention's dropped weights"))?);
    }
    Ok(buffers)
}

/// Refuses a shape whose projection or scores pass what the kernels address with an `int`, as
/// every activation is refused (`GpuTensor::resize`).
fn fits_the_kernels(shape: Attention) -> Result<()> {
    let (rows, d) = (shape.sequences.saturating_mul(shape.t), shape.width);
    let scores = [shape.heads, shape.t, shape.t].into_iter().try_fold(shape.sequences, usize::checked_mul);
    let qkv = rows.checked_mul(3).and_then(|r| r.checked_mul(d));
    let largest = qkv.zip(scores).map(|(qkv, scores)| qkv.max(scores));
    if largest.is_none_or(|n| n > i32::MAX as usize) {
        return Err(Error::Config(format!(
            "attention over {} sequences of {} positions, width {d} in {} heads, is too large for the GPU kernels: its \
             [{rows}, {}] projection or its scores ({} per sequence) pass 2^31 - 1 elements (fewer sequences per \
             micro-step fit)",
            shape.sequences,
            shape.t,
            shape.heads,
            d.saturating_mul(3),
            shape.heads.saturating_mul(shape.t).saturating_mul(shape.t),
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_past_the_kernels_int_is_refused_naming_it() {
        let shape = |sequences, t, width, heads| Attention { sequences, t, width, heads };
        assert!(fits_the_kernels(shape(12, 64, 128, 4)).is_ok());
        // [rows, 3D] passes 2^31 - 1 where [rows, D] does not.
        let error = fits_the_kernels(shape(1400, 64, 8192, 64)).unwrap_err().to_string();
        assert!(error.contains("[89600, 24576] projection"), "{error}");
        // The scores pass it with a small projection.
        assert!(fits_the_kernels(shape(65, 4096, 64, 2)).is_err());
        assert!(fits_the_kernels(shape(usize::MAX / 2, 4096, 64, 2)).is_err(), "no overflow on the way");
    }
}
