//! Dropout (PyTorch's `nn.Dropout`, nanoGPT's `dropout`): while training, each element is kept
//! with probability `1 - rate` and scaled by `1 / (1 - rate)`, or zeroed; outside training (the
//! held-out loss, sampling, a model's `forward`) it is the identity. `CausalSelfAttention` drops
//! its weights with the same draws (`DropoutDraw::for_weights`).
//!
//! The mask is `DropoutDraw`'s, hashed from where each element is: backward recomputes it, and
//! the ranks' results agree with and without dropout.

use overlap_plan::Width;

use super::context::StepContext;
use super::contract::{DeviceOp, Layer, ParamDef};
use super::dropout_draw::DropoutDraw;
use crate::init::InitRng;
use crate::tensor::Matrix;

/// Dropout at the run's rate (`TrainConfig::dropout`, `--dropout`), with no parameters: one
/// rate for every `Dropout` of the model, as nanoGPT's configuration. The rate comes with each
/// step's `StepContext`, so the same model trains with and without it and evaluates without.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropout;

impl Layer for Dropout {
    const PARAMS: &'static [ParamDef] = &[];
    const WIDTH: Width = Width::Preserving;
    type Saved = ();
    const DEVICE_OP: DeviceOp = DeviceOp::Dropout;

    fn init(_rng: &mut InitRng) -> Self {
        Dropout
    }

    fn forward(&self, ctx: &StepContext, input: &Matrix, output: &mut Matrix, _saved: &mut ()) {
        output.resize(input.rows(), input.cols());
        apply(ctx.dropout(), input, output);
    }

    fn backward(
        &self,
        ctx: &StepContext,
        input: &Matrix,
        _output: &Matrix,
        _saved: &(),
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        _accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        debug_assert!(grads.is_empty(), "Dropout has no parameter gradients");
        let Some(grad_input) = grad_input else { return };
        let shape = (input.rows(), input.cols());
        assert!(
            (grad_output.rows(), grad_output.cols()) == shape,
            "Dropout: grad_output does not match the input shape"
        );
        grad_input.resize(shape.0, shape.1);
        // The same multipliers as forward's: the mask is recomputed, not kept.
        apply(ctx.dropout(), grad_output, grad_input);
    }
}

/// `to = from ∘ mask · scale`, row by row (a copy when nothing is dropped).
fn apply(draw: DropoutDraw, from: &Matrix, to: &mut Matrix) {
    if !draw.active() {
        to.as_mut_slice().copy_from_slice(from.as_slice());
        return;
    }
    let cols = from.cols();
    draw.drop_rows(0, (from.as_slice(), to.as_mut_slice()), (cols, cols));
}

#[cfg(test)]
mod tests;
