//! Causal self-attention as nanoGPT writes it: one fused projection to queries, keys and values
//! (`c_attn`, `[3D, D]`), `H` heads of `D / H` features attending to their own and earlier
//! positions of the same sequence (scaled dot product, a numerically stable softmax over the
//! allowed positions only, no mask materialised), and an output projection (`c_proj`). The
//! products are BLAS calls per sequence and head, on each head's columns where they lie; a
//! sequence's rows come from the step context. Those over the scores go panel by panel
//! (`PANEL` positions), each over the keys its rows may see: of the masked half of the square,
//! about half of attention's product work at long contexts, only the triangles inside the
//! diagonal panels are computed. A training step with dropout drops attention's weights after the
//! softmax, as nanoGPT's `attn_dropout` does: `P·v` and `dv` read the dropped weights, kept beside
//! the softmax's, which its backward needs.

use overlap_plan::Width;

use super::context::StepContext;
use super::contract::{assert_not_lent, DeviceOp, Layer, ParamDef};
use super::exp::exp;
use super::lanes::{self, LANES};
use super::linear::column_sums;
use super::scratch::with_scratch;
use crate::host::gemm::{gemm, gemm_into, MatMut, MatRef};
use crate::init::InitRng;
use crate::tensor::Matrix;

/// `D` features in `H` heads (`D` a multiple of `H`). Parameters in PyTorch's layout and names:
/// `c_attn.weight` `[3D, D]`, `c_attn.bias` `[3D]`, `c_proj.weight` `[D, D]`, `c_proj.bias` `[D]`.
#[derive(Clone, Debug, PartialEq)]
pub struct CausalSelfAttention<const D: usize, const H: usize> {
    /// `[3D, D]`, row-major: the rows making each row's query, then its key, then its value.
    pub c_attn_weight: Vec<f32>,
    /// `[3D]`: the queries', keys' and values' biases, in that order.
    pub c_attn_bias: Vec<f32>,
    /// `[D, D]`, row-major: the output projection of the heads, concatenated.
    pub c_proj_weight: Vec<f32>,
    /// `[D]`.
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
    /// `[sequences, H, T, T]`: the weights after dropout, on a step that drops (`probs` is read
    /// in their place on one that does not).
    dropped: Vec<f32>,
}

/// Positions per causal panel: a multiple of `LANES`, so that the softmax's whole vectors stay
/// inside the scores a panel computed, and long enough for the library's kernels.
const PANEL: usize = 64;
const _: () = assert!(PANEL.is_multiple_of(LANES));

/// The causal panels of `t` positions, `panel` long: each as (first row, rows, keys seen = last
/// row + 1).
fn panels(t: usize, panel: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..t).step_by(panel).map(move |r0| {
        let end = r0.saturating_add(panel).min(t);
        (r0, end - r0, end)
    })
}

/// Rows `r0..r0 + n` of a head's `[T, hd]` block starting at element `at` of a matrix of `width`
/// columns.
fn head_rows(data: &[f32], at: usize, (r0, n): (usize, usize), hd: usize, width: usize) -> MatRef<'_> {
    MatRef::block(data, at + r0 * width, n, hd, width)
}

/// [`head_rows`], to write.
fn head_rows_mut(data: &mut [f32], at: usize, (r0, n): (usize, usize), hd: usize, width: usize) -> MatMut<'_> {
    MatMut::block(data, at + r0 * width, n, hd, width)
}

/// Where sequence `s`'s first row starts in a matrix of `width` columns, plus `offset` columns:
/// one head's `[T, hd]` block of it is read and written in place (`MatRef::block`), with no copy.
fn block_at((s, t, width): (usize, usize, usize), offset: usize) -> usize {
    s * t * width + offset
}

/// Row `i` of the scores (`first + i` of the sequence) becomes the softmax of its first
/// `first + i + 1` entries; the rest are zero.
/// Each row is read in whole vectors of `LANES` up to the allowed entries rounded up, the extra
/// ones counted as −∞ in the maximum and set to zero instead of exponentiated, so that no row
/// ends in a scalar loop (a GPT step has 6 thousand rows of 64); the maximum and the sum are
/// `lanes` reductions.
fn causal_softmax(scores: &mut [f32], t: usize, first: usize) {
    for (i, row) in scores.chunks_exact_mut(t).enumerate() {
        let allowed = first + i + 1;
        let (active, masked) = row.split_at_mut(allowed.next_multiple_of(LANES).min(t));
        let max = lanes::max_of_first(active, allowed);
        let whole = active.len() / LANES * LANES;
        let mut blocks = active.chunks_exact_mut(LANES);
        let exponentiate = |at: usize, block: &mut [f32]| {
            for (j, p) in block.iter_mut().enumerate() {
                let e = exp(*p - max);
                *p = if at + j < allowed { e } else { 0.0 };
            }
        };
        for (b, block) in (&mut blocks).enumerate() {
            exponentiate(b * LANES, block);
        }
        exponentiate(whole, blocks.into_remainder());
        let inv = 1.0 / lanes::sum(active);
        active.iter_mut().for_each(|p| *p *= inv);
        masked.fill(0.0);
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

    /// `Layer::forward` with causal panels of `panel` positions: a multiple of `LANES`, or at
    /// least `t` for the whole square in one panel.
    fn forward_in_panels(
        &self,
        ctx: &StepContext,
        input: &Matrix,
        output: &mut Matrix,
        saved: &mut AttentionSaved,
        panel: usize,
    ) {
        assert_eq!(input.cols(), D, "CausalSelfAttention<{D}, {H}>: input has {} columns", input.cols());
        assert_not_lent("CausalSelfAttention", self.holds_all());
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
        let draw = ctx.dropout().for_weights(H);
        if draw.active() {
            saved.dropped.resize(sequences * H * t * t, 0.0);
        }
        let AttentionSaved { qkv, probs, heads, dropped } = saved;
        for s in 0..sequences {
            let (in_qkv, in_heads) = (|offset| block_at((s, t, 3 * D), offset), |offset| block_at((s, t, D), offset));
            for h in 0..H {
                let (q, k, v) = (in_qkv(h * hd), in_qkv(D + h * hd), in_qkv(2 * D + h * hd));
                let square = (s * H + h) * t * t..(s * H + h + 1) * t * t;
                let probs = &mut probs[square.clone()];
                // A panel's rows: their scores against the keys they see, softmax, dropout,
                // y = P·v.
                for (r0, n, seen) in panels(t, panel) {
                    let scores = MatMut::block(probs, r0 * t, n, seen, t);
                    gemm_into(
                        scale,
                        head_rows(qkv, q, (r0, n), hd, 3 * D),
                        head_rows(qkv, k, (0, seen), hd, 3 * D).t(),
                        0.0,
                        scores,
                    );
                    causal_softmax(&mut probs[r0 * t..(r0 + n) * t], t, r0);
                    let p = if draw.active() {
                        let dropped = &mut dropped[square.clone()];
                        let first = (s * H + h) * t + r0;
                        let rows = r0 * t..(r0 + n) * t;
                        // `first` counts rows of the weights, `[sequences, H, T]`, as `for_weights` does.
                        draw.drop_rows(first, (&probs[rows.clone()], &mut dropped[rows]), (t, seen));
                        MatRef::block(dropped, r0 * t, n, seen, t)
                    } else {
                        MatRef::block(probs, r0 * t, n, seen, t)
                    };
                    let y = head_rows_mut(heads, in_heads(h * hd), (r0, n), hd, D);
                    gemm_into(1.0, p, head_rows(qkv, v, (0, seen), hd, 3 * D), 0.0, y);
                }
            }
        }
        // output = heads·W_projᵀ + b_proj.
        output.resize(rows, D);
        for r in 0..rows {
            output.row_mut(r).copy_from_slice(&self.c_proj_bias);
        }
        let heads = MatRef::row_major(&saved.heads, rows, D);
        gemm(1.0, heads, MatRef::row_major(&self.c_proj_weight, D, D).t(), 1.0, output.as_mut_slice(), rows, D);
    }

    /// `Layer::backward` with causal panels of `panel` positions.
    #[allow(clippy::too_many_arguments)]
    fn backward_in_panels(
        &self,
        ctx: &StepContext,
        input: &Matrix,
        saved: &AttentionSaved,
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        accumulate: bool,
        grad_input: Option<&mut Matrix>,
        panel: usize,
    ) {
        assert_not_lent("CausalSelfAttention", self.holds_all());
        let (rows, sequences, t, hd) = (ctx.row_count(), ctx.sequence_count(), ctx.positions(), Self::HEAD);
        let scale = 1.0 / (hd as f32).sqrt();
        let draw = ctx.dropout().for_weights(H);
        let [d_attn_w, d_attn_b, d_proj_w, d_proj_b] = grads else {
            panic!("CausalSelfAttention backward needs 4 gradient slices, got {}", grads.len());
        };
        let dy = MatRef::row_major(grad_output.as_slice(), rows, D);
        // The output projection: d_proj_b, d_proj_w (ready first, as in PyTorch), d_heads.
        column_sums(d_proj_b, grad_output.as_slice(), accumulate);
        gemm(1.0, dy.t(), MatRef::row_major(&saved.heads, rows, D), 1.0, d_proj_w, D, D);
        with_scratch([rows * D, rows * 3 * D, t * t], |[d_heads, d_qkv, ds]| {
            gemm(1.0, dy, MatRef::row_major(&self.c_proj_weight, D, D), 0.0, d_heads, rows, D);
            // Each head: dP = dy_h·vᵀ (masked as forward dropped P), dS = P ⊙ (dP − rowsum(P ⊙
            // dP)) · scale and dq = dS·k by row panels, over the keys each sees; then dk = dSᵀ·q
            // and dv = Pᵀ·dy_h (P as dropped) by key panels, over the rows that see them. Every
            // part of d_qkv is written by one of them, and no product reads dS where its row
            // panel did not write it (above the diagonal).
            let qkv = &saved.qkv;
            for s in 0..sequences {
                let (in_qkv, in_heads) =
                    (|offset| block_at((s, t, 3 * D), offset), |offset| block_at((s, t, D), offset));
                for h in 0..H {
                    let (q, k, v) = (in_qkv(h * hd), in_qkv(D + h * hd), in_qkv(2 * D + h * hd));
                    let dyh = in_heads(h * hd);
                    let square = (s * H + h) * t * t..(s * H + h + 1) * t * t;
                    let probs = &saved.probs[square.clone()];
                    let weighed = if draw.active() { &saved.dropped[square] } else { probs };
                    for (r0, n, seen) in panels(t, panel) {
                        let dp = MatMut::block(ds, r0 * t, n, seen, t);
                        gemm_into(
                            1.0,
                            head_rows(d_heads, dyh, (r0, n), hd, D),
                            head_rows(qkv, v, (0, seen), hd, 3 * D).t(),
                            0.0,
                            dp,
                        );
                        if draw.active() {
                            draw.mask_rows((s * H + h) * t + r0, &mut ds[r0 * t..(r0 + n) * t], (t, seen));
                        }
                        let panel_rows =
                            ds[r0 * t..(r0 + n) * t].chunks_exact_mut(t).zip(probs[r0 * t..].chunks_exact(t));
                        for (ds_row, p_row) in panel_rows {
                            let (ds_row, p_row) = (&mut ds_row[..seen], &p_row[..seen]);
                            let dot = lanes::dot(ds_row, p_row);
                            for (d, p) in ds_row.iter_mut().zip(p_row) {
                                *d = p * (*d - dot) * scale;
                            }
                        }
                        let dq = head_rows_mut(d_qkv, q, (r0, n), hd, 3 * D);
                        gemm_into(
                            1.0,
                            MatRef::block(ds, r0 * t, n, seen, t),
                            head_rows(qkv, k, (0, seen), hd, 3 * D),
                            0.0,
                            dq,
                        );
                    }
                    for (c0, m, _) in panels(t, panel) {
                        let later = t - c0;
                        let dk = head_rows_mut(d_qkv, k, (c0, m), hd, 3 * D);
                        gemm_into(
                            1.0,
                            MatRef::block(ds, c0 * t + c0, later, m, t).t(),
                            head_rows(qkv, q, (c0, later), hd, 3 * D),
                            0.0,
                            dk,
                        );
                        let dv = head_rows_mut(d_qkv, v, (c0, m), hd, 3 * D);
                        gemm_into(
                            1.0,
                            MatRef::block(weighed, c0 * t + c0, later, m, t).t(),
                            head_rows(d_heads, dyh, (c0, later), hd, D),
                            0.0,
                            dv,
                        );
                    }
                }
            }
            // The fused input projection: d_attn_b, d_attn_w, and dx.
            column_sums(d_attn_b, d_qkv, accumulate);
            let d_qkv_m = MatRef::row_major(d_qkv, rows, 3 * D);
            gemm(1.0, d_qkv_m.t(), MatRef::row_major(input.as_slice(), rows, D), 1.0, d_attn_w, 3 * D, D);
            if let Some(dx) = grad_input {
                dx.resize(rows, D);
                gemm(1.0, d_qkv_m, MatRef::row_major(&self.c_attn_weight, 3 * D, D), 0.0, dx.as_mut_slice(), rows, D);
            }
        });
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
        self.forward_in_panels(ctx, input, output, saved, PANEL);
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
        self.backward_in_panels(ctx, input, saved, grad_output, grads, accumulate, grad_input, PANEL);
    }
}

#[cfg(test)]
mod tests;
