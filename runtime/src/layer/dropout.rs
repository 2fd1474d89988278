//! Dropout (PyTorch's `nn.Dropout`, nanoGPT's `dropout`): while training, each element is kept
//! with probability `1 - rate` and scaled by `1 / (1 - rate)`, or zeroed; outside training (the
//! held-out loss, sampling, a model's `forward`) it is the identity. `CausalSelfAttention` drops
//! its weights with the same draws (`DropoutDraw::for_weights`).
//!
//! The mask is not drawn from a stateful generator but hashed from where the element is: the
//! run's seed, the layer's index in the model, the element's row counted over the whole global
//! batch (`first_row`: the micro-batch's first sample in the run, times the positions per
//! sample) and its column. So backward recomputes the mask instead of keeping it, the GPU's
//! kernel draws the very same mask as the CPU, a resumed run draws what the uninterrupted run
//! would have, and a global batch split over 1 rank or 4 is masked alike: the ranks' results
//! agree with and without dropout.

use overlap_plan::Width;

use super::context::StepContext;
use super::contract::{DeviceOp, Layer, ParamDef};
use crate::init::InitRng;
use crate::tensor::Matrix;

/// Draws are compared on 24 bits: rates are resolved to 2⁻²⁴.
const DRAW_BITS: u32 = 24;

/// The dropout of one micro-step, carried by its `StepContext`: the rate and where the step's
/// elements are. `NONE` (and the default) drops nothing: held-out loss, sampling, inference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DropoutDraw {
    /// An element is dropped when its 24-bit draw is below this: the rate times 2²⁴, rounded.
    threshold: u32,
    /// `1 / (1 - rate)` rounded to f32 (PyTorch's factor), as bits, so that the context stays `Eq`.
    scale_bits: u32,
    /// The run's seed, mixed with the layer's index by `for_layer`.
    stream: u64,
    /// The global index of the micro-batch's first row: its first sample's index in the run times
    /// the positions per sample.
    first_row: u64,
}

impl DropoutDraw {
    /// Nothing dropped.
    pub const NONE: DropoutDraw = DropoutDraw { threshold: 0, scale_bits: 0x3f80_0000, stream: 0, first_row: 0 };

    /// Drops elements at `rate` (in `[0, 1)`, checked by the `Trainer`'s preflight), drawn from
    /// `seed`, for a micro-batch whose first row is row `first_row` of the run.
    pub fn new(rate: f32, seed: u64, first_row: u64) -> Self {
        assert!((0.0..1.0).contains(&rate), "a dropout rate is in [0, 1), not {rate}");
        let full = 1u64 << DRAW_BITS;
        let threshold = ((f64::from(rate) * full as f64).round() as u64).min(full - 1) as u32;
        let scale = (1.0 / (1.0 - f64::from(rate))) as f32;
        DropoutDraw { threshold, scale_bits: scale.to_bits(), stream: splitmix64(seed), first_row }
    }

    /// Whether anything is dropped.
    pub const fn active(&self) -> bool {
        self.threshold > 0
    }

    /// The factor kept elements are multiplied by.
    pub fn scale(&self) -> f32 {
        f32::from_bits(self.scale_bits)
    }

    /// The 24-bit threshold below which a draw drops its element (what the GPU kernel compares).
    pub const fn threshold(&self) -> u32 {
        self.threshold
    }

    /// The stream the masks are hashed from (the seed's, mixed with a layer's index).
    pub const fn stream(&self) -> u64 {
        self.stream
    }

    /// The run-wide index of the micro-batch's first row.
    pub const fn first_row(&self) -> u64 {
        self.first_row
    }

    /// The draw of layer `index` (in definition order): every layer's mask is its own.
    pub const fn for_layer(self, index: usize) -> Self {
        DropoutDraw { stream: splitmix64(self.stream ^ (index as u64 + 1).wrapping_mul(GOLDEN_64)), ..self }
    }

    /// The draw of attention's weights, `[sequences, heads, T, T]` as rows of `T`: row `r` of
    /// the micro-batch's weights is row `first_row · heads + r` of the run's, so that they too
    /// are masked alike however the global batch is split.
    pub const fn for_weights(self, heads: usize) -> Self {
        DropoutDraw { first_row: self.first_row.wrapping_mul(heads as u64), ..self }
    }

    /// The multipliers of row `row` (of the micro-batch), one per column: `scale` where the
    /// element is kept, 0 where it is dropped (0, not a cleared element: NaN and infinity still
    /// give NaN, as PyTorch's `x * mask * scale`).
    pub(crate) fn row_factors(&self, row: usize) -> impl Iterator<Item = f32> + '_ {
        let key = row_key(self.stream, self.first_row.wrapping_add(row as u64));
        let scale = self.scale();
        (0u32..).map(move |col| if element_draw(key, col) >= self.threshold { scale } else { 0.0 })
    }
}

impl Default for DropoutDraw {
    fn default() -> Self {
        DropoutDraw::NONE
    }
}

const GOLDEN_64: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finaliser: a bijection of `u64` with full avalanche.
const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN_64);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// MurmurHash3's 32-bit finaliser: a bijection of `u32` with full avalanche.
const fn fmix32(x: u32) -> u32 {
    let mut h = x;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The key of run-wide row `row` of a stream (computed once per row).
pub const fn row_key(stream: u64, row: u64) -> u64 {
    splitmix64(stream ^ row.wrapping_mul(GOLDEN_64))
}

/// The 24-bit draw of column `col` of a row: uniform, independent across columns, rows, layers
/// and seeds as far as the two finalisers mix. `kernels/elementwise.cu` computes the same.
pub const fn element_draw(row_key: u64, col: u32) -> u32 {
    fmix32(fmix32(col ^ row_key as u32) ^ (row_key >> 32) as u32) >> (32 - DRAW_BITS)
}

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

    fn param(&self, index: usize) -> &[f32] {
        panic!("Dropout has no parameters; index {index} is out of range")
    }

    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        panic!("Dropout has no parameters; index {index} is out of range")
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
    assert!(u32::try_from(cols).is_ok(), "Dropout: {cols} columns do not fit the draw's column index");
    for (row, (out, inp)) in to.as_mut_slice().chunks_mut(cols).zip(from.as_slice().chunks(cols)).enumerate() {
        for ((y, &x), factor) in out.iter_mut().zip(inp).zip(draw.row_factors(row)) {
            *y = x * factor;
        }
    }
}

#[cfg(test)]
mod tests;
