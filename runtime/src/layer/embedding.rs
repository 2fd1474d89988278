//! The embeddings of a language model: `Embedding<V, D>` turns token ids into rows (nanoGPT's
//! `wte`), `PositionEmbedding<T, D>` adds each position's learned row (its `wpe`). The token ids
//! arrive as a one-column matrix of integral f32 values (exact up to 2^24), so that a token
//! dataset feeds the same `Batch` as any other.

use overlap_plan::Width;

use super::context::StepContext;
use super::contract::{assert_not_lent, DeviceOp, Layer, ParamDef};
use crate::init::InitRng;
use crate::tensor::Matrix;

/// Row `id` of a `[V, D]` table per input row: `y[r] = W[x[r]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding<const V: usize, const D: usize> {
    /// `[V, D]`, row-major, as `nn.Embedding.weight`.
    pub weight: Vec<f32>,
}

/// Parameter `index` of a layer whose one parameter is its `weight`.
fn the_weight<T>(layer: &str, index: usize, weight: T) -> T {
    assert_eq!(index, 0, "{layer} has one parameter (weight)");
    weight
}

/// The token id in row `r` of `input`, checked to be a whole number below `vocab`.
fn token(input: &Matrix, r: usize, vocab: usize) -> usize {
    let x = input.row(r)[0];
    let id = x as usize;
    assert!(
        x >= 0.0 && x.fract() == 0.0 && id < vocab,
        "Embedding<{vocab}, _>: row {r} holds {x}, not a token id below {vocab}"
    );
    id
}

impl<const V: usize, const D: usize> Layer for Embedding<V, D> {
    const PARAMS: &'static [ParamDef] = &[ParamDef { name: "weight", shape: &[V, D] }];
    const WIDTH: Width = Width::Fixed { input: 1, output: D };
    type Saved = ();
    const DEVICE_OP: DeviceOp = DeviceOp::Embedding { vocab: V, width: D };

    /// PyTorch's `nn.Embedding` default: N(0, 1).
    fn init(rng: &mut InitRng) -> Self {
        Embedding { weight: rng.normal(V * D, 1.0) }
    }

    fn param(&self, index: usize) -> &[f32] {
        the_weight("Embedding", index, &self.weight)
    }

    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        the_weight("Embedding", index, &mut self.weight)
    }

    fn param_vec_mut(&mut self, index: usize) -> Option<&mut Vec<f32>> {
        Some(the_weight("Embedding", index, &mut self.weight))
    }

    fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        assert_eq!(input.cols(), 1, "Embedding<{V}, {D}>: input has {} columns, not one token id", input.cols());
        assert_not_lent("Embedding", self.weight.len() == V * D);
        output.resize(input.rows(), D);
        for r in 0..input.rows() {
            let id = token(input, r, V);
            output.row_mut(r).copy_from_slice(&self.weight[id * D..(id + 1) * D]);
        }
    }

    /// `dW[id] += dy[r]` for every row: only the rows of the tokens used are touched. Token ids
    /// have no gradient: asked for one, it is zeros.
    fn backward(
        &self,
        _ctx: &StepContext,
        input: &Matrix,
        _output: &Matrix,
        _: &(),
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        _accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        if let Some(dx) = grad_input {
            dx.resize(input.rows(), 1);
            dx.as_mut_slice().fill(0.0);
        }
        let dw = &mut *grads[0];
        for r in 0..input.rows() {
            let id = token(input, r, V);
            for (g, dy) in dw[id * D..(id + 1) * D].iter_mut().zip(grad_output.row(r)) {
                *g += dy;
            }
        }
    }
}

/// `y[r] = x[r] + W[t]` for the row of position `t` in its sequence (`StepContext`).
#[derive(Clone, Debug, PartialEq)]
pub struct PositionEmbedding<const T: usize, const D: usize> {
    /// `[T, D]`: one row per position, as nanoGPT's `wpe.weight`.
    pub weight: Vec<f32>,
}

impl<const T: usize, const D: usize> PositionEmbedding<T, D> {
    fn check(ctx: &StepContext) {
        assert!(
            ctx.positions() <= T,
            "PositionEmbedding<{T}, {D}>: sequences of {} positions, it has rows for {T}",
            ctx.positions()
        );
    }
}

impl<const T: usize, const D: usize> Layer for PositionEmbedding<T, D> {
    const PARAMS: &'static [ParamDef] = &[ParamDef { name: "weight", shape: &[T, D] }];
    const WIDTH: Width = Width::Fixed { input: D, output: D };
    type Saved = ();
    const DEVICE_OP: DeviceOp = DeviceOp::PositionEmbedding { positions: T, width: D };

    /// PyTorch's `nn.Embedding` default: N(0, 1).
    fn init(rng: &mut InitRng) -> Self {
        PositionEmbedding { weight: rng.normal(T * D, 1.0) }
    }

    fn param(&self, index: usize) -> &[f32] {
        the_weight("PositionEmbedding", index, &self.weight)
    }

    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        the_weight("PositionEmbedding", index, &mut self.weight)
    }

    fn param_vec_mut(&mut self, index: usize) -> Option<&mut Vec<f32>> {
        Some(the_weight("PositionEmbedding", index, &mut self.weight))
    }

    fn forward(&self, ctx: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        Self::check(ctx);
        assert_not_lent("PositionEmbedding", self.weight.len() == T * D);
        output.resize(input.rows(), D);
        for s in 0..ctx.sequence_count() {
            for (t, r) in ctx.sequence_rows(s).enumerate() {
                let position = &self.weight[t * D..(t + 1) * D];
                for ((y, x), p) in output.row_mut(r).iter_mut().zip(input.row(r)).zip(position) {
                    *y = x + p;
                }
            }
        }
    }

    /// `dW[t] += Σ_s dy[s, t]`, and `dx = dy`.
    fn backward(
        &self,
        ctx: &StepContext,
        _input: &Matrix,
        _output: &Matrix,
        _: &(),
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        _accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        Self::check(ctx);
        let dw = &mut *grads[0];
        for s in 0..ctx.sequence_count() {
            for (t, r) in ctx.sequence_rows(s).enumerate() {
                for (g, dy) in dw[t * D..(t + 1) * D].iter_mut().zip(grad_output.row(r)) {
                    *g += dy;
                }
            }
        }
        if let Some(dx) = grad_input {
            dx.clone_from(grad_output);
        }
    }
}

/// The token ids of a batch checked before a model's first `Embedding<vocab, _>` reads them, so
/// that a dataset's bad id is an error naming it rather than the layer's panic (the training
/// loop calls it on both devices).
pub fn check_token_ids(inputs: &Matrix, vocab: usize) -> crate::error::Result<()> {
    match inputs.as_slice().iter().position(|&x| !(x >= 0.0 && x.fract() == 0.0 && (x as usize) < vocab)) {
        None => Ok(()),
        Some(r) => Err(crate::error::Error::Dataset(format!(
            "row {r} of the batch holds {}, not a token id below the embedding's {vocab}",
            inputs.as_slice()[r]
        ))),
    }
}
