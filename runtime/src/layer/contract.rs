//! What a layer is to the runtime and to the code `#[distributed_model]` emits: its parameters,
//! widths and computation (`Layer`), what the device backends run for it (`DeviceOp`), and the
//! compile-time check of a type against the layout the schedule was planned with.

use overlap_plan::{ReadyOrder, Width};

use super::context::StepContext;
use crate::init::InitRng;
use crate::tensor::Matrix;

/// Name and shape of one parameter tensor, PyTorch's layout (`Linear` weight is `[out, in]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamDef {
    /// The name after the field's (`weight` in `fc1.weight`).
    pub name: &'static str,
    /// Dimensions, outermost first.
    pub shape: &'static [usize],
}

impl ParamDef {
    /// Elements: the product of the dimensions.
    pub const fn numel(&self) -> usize {
        let mut n = 1;
        let mut i = 0;
        while i < self.shape.len() {
            n *= self.shape[i];
            i += 1;
        }
        n
    }
}

/// What a layer computes, for backends that run each layer by its kind rather than through its
/// `forward`/`backward` methods (the CUDA backend). A user layer that has no device kernels keeps
/// the default, `Unsupported`, and such a model is refused on the device with its name. One that
/// names a built-in's op runs that built-in's kernels on the GPU in place of its own methods, so
/// it must compute what the built-in computes; its parameters and widths must be the built-in's
/// (checked at compile time, where the macro checks the layer's other constants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceOp {
    /// `y = x·Wᵀ + b`, `W` of shape `[output, input]`.
    Linear {
        /// Features in (`IN`).
        input: usize,
        /// Features out (`OUT`).
        output: usize,
    },
    /// `max(x, 0)`, element-wise.
    Relu,
    /// The tanh approximation, as the CPU layer.
    Gelu,
    /// `tanh(x)`, element-wise.
    Tanh,
    /// `1 / (1 + exp(-x))`, element-wise.
    Sigmoid,
    /// Dropout at the step's rate (`StepContext::dropout`), element-wise.
    Dropout,
    /// Over `width` features, eps 1e-5, elementwise affine.
    LayerNorm {
        /// Features per row, normalised together.
        width: usize,
    },
    /// nanoGPT's causal self-attention over `width` features in `heads` heads.
    CausalSelfAttention {
        /// Features per row (`D`).
        width: usize,
        /// Heads (`H`), each of `width / heads` features.
        heads: usize,
    },
    /// Token ids (one column) to rows of a `[vocab, width]` table.
    Embedding {
        /// Rows of the table: token ids run from 0 to `vocab - 1`.
        vocab: usize,
        /// Features per token.
        width: usize,
    },
    /// Adds row `t` of a `[positions, width]` table to each row of position `t`.
    PositionEmbedding {
        /// Rows of the table: the longest sequence it can embed.
        positions: usize,
        /// Features per row.
        width: usize,
    },
    /// `y = x·Wᵀ` with `W` the `[output, input]` weight of the layer it is tied to.
    TiedHead {
        /// Features in (the tied table's width).
        input: usize,
        /// Features out (the tied table's rows, e.g. the vocabulary).
        output: usize,
    },
    /// No device kernel: the CUDA backend refuses a model with such a layer, naming it.
    Unsupported,
}

/// A layer of a `#[distributed_model]` struct: owns its parameters; gradients are written into
/// bucket views handed to `backward`.
pub trait Layer: Sized + Send {
    /// Parameters in definition order; checkpoint names are `field.name`.
    const PARAMS: &'static [ParamDef];
    /// Input and output width, or `Preserving` for element-wise layers.
    const WIDTH: Width;
    /// The order `backward` makes the parameters' gradients ready in: PyTorch autograd's for the
    /// same layer (`Linear`: bias, then weight, the default; `LayerNorm`: weight, then bias), so
    /// that the buckets planned from it are DDP's rebuilt buckets. `#[layer(ready = ...)]` states
    /// it to the macro for a layer of one's own; the two are checked to agree at compile time.
    const READY_ORDER: ReadyOrder = ReadyOrder::Reverse;
    /// Whatever `forward` saves for `backward` besides input and output (e.g. LayerNorm's
    /// per-row mean and reciprocal standard deviation).
    type Saved: Default + Send;
    /// What the layer computes, for the device backends.
    const DEVICE_OP: DeviceOp = DeviceOp::Unsupported;

    /// Deterministic initialisation from `rng` (PyTorch's defaults for the built-in layers).
    fn init(rng: &mut InitRng) -> Self;

    /// Parameter `index` of `PARAMS`, flattened row-major. A layer without parameters need not
    /// write it; one with parameters that does not is refused when its model is built.
    fn param(&self, index: usize) -> &[f32] {
        no_parameter::<Self>(index)
    }
    /// Parameter `index`, to write: the optimizer's update, rank 0's broadcast values, a
    /// checkpoint's or a parameter file's. As `param`, only layers with parameters write it.
    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        no_parameter::<Self>(index)
    }

    /// The `Vec` that holds parameter `index`, so that a step can lend it to the all-reduce of
    /// its bucket and update it there, while the sums are in cache (it is empty until the step's
    /// wait point gives it back). The default, `None`, keeps the update after the wait point.
    fn param_vec_mut(&mut self, index: usize) -> Option<&mut Vec<f32>> {
        let _ = index;
        None
    }

    /// Computes `output` (resized here to `input.rows() x out`). `input` has `ctx.row_count()`
    /// rows; a layer that mixes positions reads how they group into sequences from `ctx`.
    fn forward(&self, ctx: &StepContext, input: &Matrix, output: &mut Matrix, saved: &mut Self::Saved);

    /// Writes parameter gradients into `grads` (one slice per entry of `PARAMS`), adding to them
    /// when `accumulate` is set, and the input gradient into `grad_input` when asked (the first
    /// layer of a model is not asked: nothing needs it). When `accumulate` is not set, `grads`
    /// hold zeros (a step starts from cleared gradients), so adding is as good as writing.
    ///
    /// Gradients are produced in `READY_ORDER`: the planner assigns them to buckets in the order
    /// they become ready, layers in reverse and within a layer in that order. A bucket is
    /// launched only once the whole call has returned, so the order decides which bucket a
    /// parameter joins when a cap falls inside a layer, never what is computed.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        ctx: &StepContext,
        input: &Matrix,
        output: &Matrix,
        saved: &Self::Saved,
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        accumulate: bool,
        grad_input: Option<&mut Matrix>,
    );
}

/// What `Layer::param` and `Layer::param_mut` do unless a layer writes them: nothing to give for
/// a layer without parameters, and, for one that declares some, the panic that names the
/// methods it must write (the model's construction reads every parameter first).
fn no_parameter<L: Layer>(index: usize) -> ! {
    let name = std::any::type_name::<L>();
    match L::PARAMS.len() {
        0 => panic!("{name} has no parameters; index {index} is out of range"),
        n => panic!(
            "{name} declares {n} parameter(s) in `PARAMS` but does not give them: a layer with parameters writes \
             `Layer::param` and `Layer::param_mut`"
        ),
    }
}

/// Panics unless a layer holds all its parameters (`holds_all`): one lent to its bucket's
/// collective (`Layer::param_vec_mut`) is empty until the step gives it back. The built-in layers
/// ask in their own methods; the host program asks for every layer (`program/fits.rs`).
pub(crate) fn assert_not_lent(layer: &str, holds_all: bool) {
    assert!(
        holds_all,
        "{layer}: its parameters are lent to a collective that updates them: `step` takes them back from the \
         buckets `backward` returned (do not drop those, and call `step` before the next `backward`), and after a \
         step with sharded optimizer state, `forward_gathering` from the all-gathers"
    );
}
