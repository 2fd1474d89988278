//! Causal self-attention on the GPU: `c_attn` and `c_proj` as linear layers, each head's scores
//! and weighted values as cuBLAS products on strided views inside the `[rows, 3D]` queries, keys
//! and values and the `[rows, D]` heads (no copies), and the causal softmax and its backward as
//! kernels (`kernels/attention.cu`). The same math as `layer::CausalSelfAttention` on the host.

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

use super::gpu::{cuda, Gpu};
use super::ops;
use super::storage::{AttentionBuffers, GpuSaved, GpuTensor};
use crate::error::Result;

/// The shape of one attention call: `sequences` of `t` positions, `width` features in `heads`.
#[derive(Clone, Copy)]
pub(super) struct Attention {
    pub(super) sequences: usize,
    pub(super) t: usize,
    pub(super) width: usize,
    pub(super) heads: usize,
}

impl Attention {
    fn rows(&self) -> usize {
        self.sequences * self.t
    }

    fn head(&self) -> usize {
        self.width / self.heads
    }

    /// Elements of the `[sequences, heads, t, t]` scores.
    pub(super) fn scores(&self) -> usize {
        self.sequences * self.heads * self.t * self.t
    }

    /// Offset of sequence `s`'s first row, column `column`, in a matrix of `width` columns.
    fn at(&self, s: usize, width: usize, column: usize) -> usize {
        s * self.t * width + column
    }

    /// `c_attn`, each head's scores, the causal softmax, each head's weighted values, `c_proj`.
    pub(super) fn forward(
        &self,
        gpu: &Gpu,
        x: &GpuTensor,
        params: [CudaView<f32>; 4],
        b: &mut AttentionBuffers,
        y: &mut GpuTensor,
    ) -> Result<()> {
        let (d, t, hd, rows) = (self.width, self.t, self.head(), self.rows());
        let [wa, ba, wp, bp] = params;
        ops::linear_forward(gpu, (d, 3 * d, rows), x.view(), wa, ba, &mut b.qkv.slice_mut(..rows * 3 * d))?;
        for s in 0..self.sequences {
            for h in 0..self.heads {
                let (q, k) = (b.qkv.slice(self.at(s, 3 * d, h * hd)..), b.qkv.slice(self.at(s, 3 * d, d + h * hd)..));
                let scores = &mut b.probs.slice_mut((s * self.heads + h) * t * t..);
                ops::matmul(gpu, (false, true), (t, t, hd), (&q, 3 * d), (&k, 3 * d), 0.0, (scores, t))?;
            }
        }
        let scale = 1.0 / (hd as f32).sqrt();
        ops::causal_softmax(gpu, (self.sequences * self.heads * t, t), scale, &mut b.probs.slice_mut(..self.scores()))?;
        for s in 0..self.sequences {
            for h in 0..self.heads {
                let (p, v) =
                    (b.probs.slice((s * self.heads + h) * t * t..), b.qkv.slice(self.at(s, 3 * d, 2 * d + h * hd)..));
                let out = &mut b.heads.slice_mut(self.at(s, d, h * hd)..);
                ops::matmul(gpu, (false, false), (t, hd, t), (&p, t), (&v, 3 * d), 0.0, (out, d))?;
            }
        }
        ops::linear_forward(gpu, (d, d, rows), b.heads.slice(..rows * d), wp, bp, &mut y.view_mut())
    }

    /// `c_proj`'s gradients and the heads'; per head dP = dy·vᵀ and dv = Pᵀ·dy; the softmax's
    /// backward; per head dq = dS·k and dk = dSᵀ·q; `c_attn`'s gradients and the input's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn backward(
        &self,
        gpu: &Gpu,
        (x, dy): (&GpuTensor, &GpuTensor),
        [wa, wp]: [CudaView<f32>; 2],
        b: &AttentionBuffers,
        (d_heads, d_qkv, ds): (&mut CudaSlice<f32>, &mut CudaSlice<f32>, &mut CudaSlice<f32>),
        [dwa, dba, dwp, dbp]: [&mut CudaViewMut<f32>; 4],
        accumulate: bool,
        dx: Option<&mut CudaViewMut<f32>>,
    ) -> Result<()> {
        let (d, t, hd, rows) = (self.width, self.t, self.head(), self.rows());
        let heads_out = b.heads.slice(..rows * d);
        let d_heads_out = &mut d_heads.slice_mut(..rows * d);
        ops::linear_backward(gpu, (d, d, rows), (heads_out, wp, dy.view()), (dwp, dbp), accumulate, Some(d_heads_out))?;
        for s in 0..self.sequences {
            for h in 0..self.heads {
                let at = (s * self.heads + h) * t * t;
                let (dyh, v) =
                    (d_heads.slice(self.at(s, d, h * hd)..), b.qkv.slice(self.at(s, 3 * d, 2 * d + h * hd)..));
                ops::matmul(gpu, (false, true), (t, t, hd), (&dyh, d), (&v, 3 * d), 0.0, (&mut ds.slice_mut(at..), t))?;
                let p = b.probs.slice(at..);
                let dv = &mut d_qkv.slice_mut(self.at(s, 3 * d, 2 * d + h * hd)..);
                ops::matmul(gpu, (true, false), (t, hd, t), (&p, t), (&dyh, d), 0.0, (dv, 3 * d))?;
            }
        }
        let scale = 1.0 / (hd as f32).sqrt();
        let (scores, probs) = (self.scores(), b.probs.slice(..self.scores()));
        ops::causal_softmax_backward(
            gpu,
            (self.sequences * self.heads * t, t),
            scale,
            probs,
            &mut ds.slice_mut(..scores),
        )?;
        for s in 0..self.sequences {
            for h in 0..self.heads {
                let dsh = ds.slice((s * self.heads + h) * t * t..);
                let (q, k) = (b.qkv.slice(self.at(s, 3 * d, h * hd)..), b.qkv.slice(self.at(s, 3 * d, d + h * hd)..));
                let dq = &mut d_qkv.slice_mut(self.at(s, 3 * d, h * hd)..);
                ops::matmul(gpu, (false, false), (t, hd, t), (&dsh, t), (&k, 3 * d), 0.0, (dq, 3 * d))?;
                let dk = &mut d_qkv.slice_mut(self.at(s, 3 * d, d + h * hd)..);
                ops::matmul(gpu, (true, false), (t, hd, t), (&dsh, t), (&q, 3 * d), 0.0, (dk, 3 * d))?;
            }
        }
        let d_qkv_in = d_qkv.slice(..rows * 3 * d);
        ops::linear_backward(gpu, (d, 3 * d, rows), (x.view(), wa, d_qkv_in), (dwa, dba), accumulate, dx)
    }
}

/// Attention's buffers for this call's shape, allocated on first use or to grow.
pub(super) fn attention_buffers<'s>(
    gpu: &Gpu,
    saved: &'s mut GpuSaved,
    shape: Attention,
) -> Result<&'s mut AttentionBuffers> {
    let (rows, d) = (shape.rows(), shape.width);
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
        });
    }
    Ok(saved.attention.as_mut().expect("allocated above"))
}
