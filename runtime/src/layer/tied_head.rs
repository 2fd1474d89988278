//! A language model's output layer tied to its token embedding (nanoGPT's and GPT-2's
//! `lm_head.weight = wte.weight`): `logits = x·Wᵀ` with `W` the embedding's `[V, D]` table and no
//! bias. It owns no parameter: `#[tied(wte)]` on its field names the embedding whose weight it
//! reads, and the generated program hands that weight, and that weight's gradient slot, to
//! `TiedLayer`'s methods. The slot receives the head's dense contribution first (early in
//! backward) and the embedding's rows last, so the one bucket holding it is reduced once, with
//! both summed.

use overlap_plan::Width;

use super::context::StepContext;
use super::contract::{assert_not_lent, DeviceOp, Layer, ParamDef};
use crate::host::gemm::{gemm, MatRef};
use crate::init::InitRng;
use crate::tensor::Matrix;

/// A layer whose weight is another layer's parameter (`#[tied(field)]`).
pub trait TiedLayer: Layer {
    /// `forward` with `weight`, the tied parameter's values.
    fn forward_tied(
        &self,
        weight: &[f32],
        ctx: &StepContext,
        input: &Matrix,
        output: &mut Matrix,
        saved: &mut Self::Saved,
    );

    /// `backward` with `weight`, adding this layer's contribution to `grad_weight`, the tied
    /// parameter's gradient (writing it when `accumulate` is not set: the step's first
    /// contribution to a cleared slot).
    #[allow(clippy::too_many_arguments)]
    fn backward_tied(
        &self,
        weight: &[f32],
        ctx: &StepContext,
        input: &Matrix,
        output: &Matrix,
        saved: &Self::Saved,
        grad_output: &Matrix,
        grad_weight: &mut [f32],
        accumulate: bool,
        grad_input: Option<&mut Matrix>,
    );
}

/// `D` features to `V` logits through the transpose of a tied `[V, D]` embedding table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TiedHead<const D: usize, const V: usize>;

const UNTIED: &str = "reads the weight it is tied to: mark its field `#[tied(embedding)]` in a #[distributed_model], \
                      whose program calls `TiedLayer::forward_tied` and `backward_tied`";

impl<const D: usize, const V: usize> Layer for TiedHead<D, V> {
    const PARAMS: &'static [ParamDef] = &[];
    const WIDTH: Width = Width::Fixed { input: D, output: V };
    type Saved = ();
    const DEVICE_OP: DeviceOp = DeviceOp::TiedHead { input: D, output: V };

    fn init(_rng: &mut InitRng) -> Self {
        TiedHead
    }

    fn param(&self, index: usize) -> &[f32] {
        panic!("TiedHead has no parameters of its own; index {index} is out of range")
    }

    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        panic!("TiedHead has no parameters of its own; index {index} is out of range")
    }

    fn forward(&self, _: &StepContext, _: &Matrix, _: &mut Matrix, _: &mut ()) {
        panic!("TiedHead<{D}, {V}> {UNTIED}")
    }

    fn backward(
        &self,
        _: &StepContext,
        _: &Matrix,
        _: &Matrix,
        _: &(),
        _: &Matrix,
        _: &mut [&mut [f32]],
        _: bool,
        _: Option<&mut Matrix>,
    ) {
        panic!("TiedHead<{D}, {V}> {UNTIED}")
    }
}

impl<const D: usize, const V: usize> TiedLayer for TiedHead<D, V> {
    fn forward_tied(&self, weight: &[f32], _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        assert_not_lent("TiedHead", weight.len() == V * D);
        assert_eq!(input.cols(), D, "TiedHead<{D}, {V}>: input has {} columns", input.cols());
        let rows = input.rows();
        output.resize(rows, V);
        let x = MatRef::row_major(input.as_slice(), rows, D);
        gemm(1.0, x, MatRef::row_major(weight, V, D).t(), 0.0, output.as_mut_slice(), rows, V);
    }

    fn backward_tied(
        &self,
        weight: &[f32],
        _ctx: &StepContext,
        input: &Matrix,
        _output: &Matrix,
        _: &(),
        grad_output: &Matrix,
        grad_weight: &mut [f32],
        _accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        assert_not_lent("TiedHead", weight.len() == V * D);
        let rows = input.rows();
        assert!(
            grad_output.rows() == rows && grad_output.cols() == V,
            "TiedHead<{D}, {V}>: grad_output is {}x{}, expected {rows}x{V}",
            grad_output.rows(),
            grad_output.cols()
        );
        let (x, dy) =
            (MatRef::row_major(input.as_slice(), rows, D), MatRef::row_major(grad_output.as_slice(), rows, V));
        // dW += dyᵀ·x whether or not accumulating: a cleared slot (the step's first contribution)
        // takes beta 1 as well, as `Linear`'s weight gradient does.
        gemm(1.0, dy.t(), x, 1.0, grad_weight, V, D);
        if let Some(dx) = grad_input {
            dx.resize(rows, D);
            gemm(1.0, dy, MatRef::row_major(weight, V, D), 0.0, dx.as_mut_slice(), rows, D);
        }
    }
}
