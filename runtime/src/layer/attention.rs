//! Causal self-attention as nanoGPT writes it: one fused projection to queries, keys and values
//! (`c_attn`, `[3D, D]`), `H` heads of `D / H` features attending to their own and earlier
//! positions of the same sequence (scaled dot product, a numerically stable softmax over the
//! allowed positions only, no mask materialised), and an output projection (`c_proj`). The
//! products are BLAS calls per sequence and head; a sequence's rows come from the step context.

use overlap_plan::Width;

use super::context::StepContext;
use super::contract::{DeviceOp, Layer, ParamDef};
use super::exp::exp;
use super::lanes::{self, LANES};
use super::linear::column_sums;
use super::scratch::with_scratch;
use crate::host::gemm::{gemm, MatRef};
use crate::init::InitRng;
use crate::tensor::Matrix;

/// `D` features in `H` heads (`D` a multiple of `H`). Parameters in PyTorch's layout and names:
/// `c_attn.weight` `[3D, D]`, `c_attn.bias` `[3D]`, `c_proj.weight` `[D, D]`, `c_proj.bias` `[D]`.
#[derive(Clone, Debug, PartialEq)]
pub struct CausalSelfAttention<const D: usize, const H: usize> {
    pub c_attn_weight: Vec<f32>,
    pub c_attn_bias: Vec<f32>,
    pub c_proj_weight: Vec<f32>,
    pub c_proj_bias: Vec<f32>,
}

/// What forward keeps for backward.
#[derive(Clone, Debug, Default)]
pub struct AttentionSaved {
    /// `[rows, 3D]`: each row's query, key and value.
    qkv: Vec<f32>,
    /// `[sequences, H, T, T]`: the attention weights (zero above the diagonal).
    probs: Vec<f32>,
    /// `[rows, D]`: the heads' outputs side by side, before `c_proj`.
    heads: Vec<f32>,
}

/// One head's `[T, hd]` slices of a `[rows, width]` matrix: rows of sequence `s`, columns from
/// `offset`.
fn gather(src: &[f32], width: usize, (s, t, offset, hd): (usize, usize, usize, usize), dst: &mut [f32]) {
    for i in 0..t {
        let row = (s * t + i) * width + offset;
        dst[i * hd..(i + 1) * hd].copy_from_slice(&src[row..row + hd]);
    }
}

/// The inverse of `gather`.
fn scatter(src: &[f32], dst: &mut [f32], width: usize, (s, t, offset, hd): (usize, usize, usize, usize)) {
    for i in 0..t {
        let row = (s * t + i) * width + offset;
        dst[row..row + hd].copy_from_slice(&src[i * hd..(i + 1) * hd]);
    }
}

/// Row `i` of the scores becomes the softmax of its first `i + 1` entries; the rest are zero.
/// The exponentials run over the allowed entries rounded up to whole vectors of `LANES` (the
/// extra ones then zeroed), so that no row ends in a scalar loop; the maximum and the sum are
/// `lanes` reductions.
fn causal_softmax(scores: &mut [f32], t: usize) {
    for (i, row) in scores.chunks_exact_mut(t).enumerate() {
        let allowed = i + 1;
        let max = lanes::max(&row[..allowed]);
        let (active, masked) = row.split_at_mut(allowed.next_multiple_of(LANES).min(t));
        let mut blocks = active.chunks_exact_mut(LANES);
        for block in &mut blocks {
            block.iter_mut().for_each(|p| *p = exp(*p - max));
        }
        blocks.into_remainder().iter_mut().for_each(|p| *p = exp(*p - max));
        active[allowed..].fill(0.0);
        masked.fill(0.0);
        let inv = 1.0 / lanes::sum(active);
        active[..allowed].iter_mut().for_each(|p| *p *= inv);
    }
}

impl<const D: usize, const H: usize> CausalSelfAttention<D, H> {
    /// Features per head; a width that does not split evenly stops the build.
    const HEAD: usize = {
        assert!(H > 0 && D.is_multiple_of(H), "CausalSelfAttention<D, H>: D must be a multiple of H");
        D / H
    };

    fn holds_all(&self) -> bool {
        self.c_attn_weight.len() == 3 * D * D
            && self.c_attn_bias.len() == 3 * D
            && self.c_proj_weight.len() == D * D
            && self.c_proj_bias.len() == D
    }
}

impl<const D: usize, const H: usize> Layer for CausalSelfAttention<D, H> {
    const PARAMS: &'static [ParamDef] = &[
        ParamDef { name: "c_attn.weight", shape: &[3 * D, D] },
        ParamDef { name: "c_attn.bias", shape: &[3 * D] },
        ParamDef { name: "c_proj.weight", shape: &[D, D] },
        ParamDef { name: "c_proj.bias", shape: &[D] },
    ];
    const WIDTH: Width = Width::Fixed { input: D, output: D };
    type Saved = AttentionSaved;
    const DEVICE_OP: DeviceOp = DeviceOp::CausalSelfAttention { width: D, heads: H };

    /// PyTorch's `nn.Linear` default for both projections: U(-1/sqrt(D), 1/sqrt(D)).
    fn init(rng: &mut InitRng) -> Self {
        let _ = Self::HEAD;
        let bound = 1.0 / (D as f32).sqrt();
        CausalSelfAttention {
            c_attn_weight: rng.uniform(3 * D * D, bound),
            c_attn_bias: rng.uniform(3 * D, bound),
            c_proj_weight: rng.uniform(D * D, bound),
            c_proj_bias: rng.uniform(D, bound),
        }
    }

    fn param(&self, index: usize) -> &[f32] {
        match index {
            0 => &self.c_attn_weight,
            1 => &self.c_attn_bias,
            2 => &self.c_proj_weight,
            3 => &self.c_proj_bias,
            _ => panic!("CausalSelfAttention has 4 parameters; index {index} is out of range"),
        }
    }

    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        self.param_vec_mut(index).expect("every parameter is a Vec")
    }

    fn param_vec_mut(&mut self, index: usize) -> Option<&mut Vec<f32>> {
        Some(match index {
            0 => &mut self.c_attn_weight,
            1 => &mut self.c_attn_bias,
            2 => &mut self.c_proj_weight,
            3 => &mut self.c_proj_bias,
            _ => panic!("CausalSelfAttention has 4 parameters; index {index} is out of range"),
        })
    }

    fn forward(&self, ctx: &StepContext, input: &Matrix, output: &mut Matrix, saved: &mut AttentionSaved) {
        assert_eq!(input.cols(), D, "CausalSelfAttention<{D}, {H}>: input has {} columns", input.cols());
        assert!(self.holds_all(), "CausalSelfAttention: its parameters are lent to an all-reduce; call `step` first");
        let (rows, sequences, t, hd) = (ctx.row_count(), ctx.sequence_count(), ctx.positions(), Self::HEAD);
        let scale = 1.0 / (hd as f32).sqrt();
        let x = MatRef::row_major(input.as_slice(), rows, D);
        // qkv = x·W_attnᵀ + b_attn: each row seeded with the bias, the product added to it.
        saved.qkv.resize(rows * 3 * D, 0.0);
        for row in saved.qkv.chunks_exact_mut(3 * D) {
            row.copy_from_slice(&self.c_attn_bias);
        }
        gemm(1.0, x, MatRef::row_major(&self.c_attn_weight, 3 * D, D).t(), 1.0, &mut saved.qkv, rows, 3 * D);
        saved.probs.resize(sequences * H * t * t, 0.0);
        saved.heads.resize(rows * D, 0.0);
        with_scratch([t * hd; 4], |[q, k, v, y]| {
            for s in 0..sequences {
                for h in 0..H {
                    gather(&saved.qkv, 3 * D, (s, t, h * hd, hd), q);
                    gather(&saved.qkv, 3 * D, (s, t, D + h * hd, hd), k);
                    gather(&saved.qkv, 3 * D, (s, t, 2 * D + h * hd, hd), v);
                    let probs = &mut saved.probs[(s * H + h) * t * t..(s * H + h + 1) * t * t];
                    let (qm, km) = (MatRef::row_major(q, t, hd), MatRef::row_major(k, t, hd));
                    gemm(scale, qm, km.t(), 0.0, probs, t, t);
                    causal_softmax(probs, t);
                    gemm(1.0, MatRef::row_major(probs, t, t), MatRef::row_major(v, t, hd), 0.0, y, t, hd);
                    scatter(y, &mut saved.heads, D, (s, t, h * hd, hd));
                }
            }
        });
        // output = heads·W_projᵀ + b_proj.
        output.resize(rows, D);
        for r in 0..rows {
            output.row_mut(r).copy_from_slice(&self.c_proj_bias);
        }
        let heads = MatRef::row_major(&saved.heads, rows, D);
        gemm(1.0, heads, MatRef::row_major(&self.c_proj_weight, D, D).t(), 1.0, output.as_mut_slice(), rows, D);
    }

    fn backward(
        &self,
        ctx: &StepContext,
        input: &Matrix,
        _output: &Matrix,
        saved: &AttentionSaved,
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        let (rows, sequences, t, hd) = (ctx.row_count(), ctx.sequence_count(), ctx.positions(), Self::HEAD);
        let scale = 1.0 / (hd as f32).sqrt();
        let [d_attn_w, d_attn_b, d_proj_w, d_proj_b] = grads else {
            panic!("CausalSelfAttention backward needs 4 gradient slices, got {}", grads.len());
        };
        let dy = MatRef::row_major(grad_output.as_slice(), rows, D);
        // The output projection: d_proj_b, d_proj_w (ready first, as in PyTorch), d_heads.
        let dy_values = grad_output.as_slice();
        column_sums(d_proj_b, rows, accumulate, |r, c| dy_values[r * D + c]);
        gemm(1.0, dy.t(), MatRef::row_major(&saved.heads, rows, D), 1.0, d_proj_w, D, D);
        let (head, buffers) = (t * hd, [rows * D, rows * 3 * D, t * t]);
        with_scratch([buffers[0], buffers[1], buffers[2], head, head, head, head, head, head, head], |scratch| {
            let [d_heads, d_qkv, ds, q, k, v, dyh, dq, dk, dv] = scratch;
            gemm(1.0, dy, MatRef::row_major(&self.c_proj_weight, D, D), 0.0, d_heads, rows, D);
            // Each head: dP = dy_h·vᵀ, dv = Pᵀ·dy_h, dS = P ⊙ (dP − rowsum(P ⊙ dP)) · scale,
            // dq = dS·k, dk = dSᵀ·q; every part of d_qkv is written by one of them.
            for s in 0..sequences {
                for h in 0..H {
                    let at = |offset| (s, t, offset, hd);
                    gather(&saved.qkv, 3 * D, at(h * hd), q);
                    gather(&saved.qkv, 3 * D, at(D + h * hd), k);
                    gather(&saved.qkv, 3 * D, at(2 * D + h * hd), v);
                    gather(d_heads, D, at(h * hd), dyh);
                    let probs = &saved.probs[(s * H + h) * t * t..(s * H + h + 1) * t * t];
                    let (p, dyh_m) = (MatRef::row_major(probs, t, t), MatRef::row_major(dyh, t, hd));
                    gemm(1.0, dyh_m, MatRef::row_major(v, t, hd).t(), 0.0, ds, t, t);
                    gemm(1.0, p.t(), dyh_m, 0.0, dv, t, hd);
                    for (ds_row, p_row) in ds.chunks_exact_mut(t).zip(probs.chunks_exact(t)) {
                        let dot = lanes::dot(ds_row, p_row);
                        for (d, p) in ds_row.iter_mut().zip(p_row) {
                            *d = p * (*d - dot) * scale;
                        }
                    }
                    let ds_m = MatRef::row_major(ds, t, t);
                    gemm(1.0, ds_m, MatRef::row_major(k, t, hd), 0.0, dq, t, hd);
                    gemm(1.0, ds_m.t(), MatRef::row_major(q, t, hd), 0.0, dk, t, hd);
                    scatter(dq, d_qkv, 3 * D, at(h * hd));
                    scatter(dk, d_qkv, 3 * D, at(D + h * hd));
                    scatter(dv, d_qkv, 3 * D, at(2 * D + h * hd));
                }
            }
            // The fused input projection: d_attn_b, d_attn_w, and dx.
            column_sums(d_attn_b, rows, accumulate, |r, c| d_qkv[r * 3 * D + c]);
            let d_qkv_m = MatRef::row_major(d_qkv, rows, 3 * D);
            gemm(1.0, d_qkv_m.t(), MatRef::row_major(input.as_slice(), rows, D), 1.0, d_attn_w, 3 * D, D);
            if let Some(dx) = grad_input {
                dx.resize(rows, D);
                gemm(1.0, d_qkv_m, MatRef::row_major(&self.c_attn_weight, 3 * D, D), 0.0, dx.as_mut_slice(), rows, D);
            }
        });
    }
}
