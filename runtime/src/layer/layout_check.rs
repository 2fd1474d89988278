//! The compile-time check that a layer type's `Layer` constants are those the bucket schedule
//! was planned with (the macro emits one per field), and which constant differs when they are not.

use overlap_plan::{ReadyOrder, Width};

use super::contract::{DeviceOp, Layer, ParamDef};

/// Compile-time check used by the macro: does `L` have exactly the widths, parameter names and
/// shapes, and ready order the schedule was planned with? (The names too: the schedule names each
/// parameter in checkpoints and `#[init]`'s suffixes, and `param(i)` must be the one so named.)
/// For a layer planned as a built-in by its name, `op` is that built-in's `DEVICE_OP`, which `L`
/// must declare too: another type under its name with the same constants (`use overlap::Gelu as
/// Relu`) would run while the schedule and the cost model describe another layer.
pub const fn layer_matches<L: Layer>(
    width: Width,
    params: &[(&str, &[usize])],
    ready: ReadyOrder,
    op: Option<DeviceOp>,
) -> bool {
    !layout_mismatch::<L>(width, params, ready, op).found()
}

/// Which of `L`'s constants first differs from what the schedule was planned with: the
/// generated check names it in its message (the values of `L`'s own a `const` panic cannot
/// print).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutMismatch {
    /// Every constant is as planned.
    None,
    /// `DEVICE_OP` is not the built-in's whose name the layer was planned by.
    DeviceOp,
    /// `WIDTH` differs.
    Width,
    /// `PARAMS` holds another number of parameters.
    ParamCount,
    /// `READY_ORDER` differs (with two parameters or more, where it matters).
    ReadyOrder,
    /// `PARAMS[i].name` differs.
    Name(usize),
    /// `PARAMS[i].shape` differs.
    Shape(usize),
    /// `DEVICE_OP` names a built-in's kernels, which read and write other parameters or widths
    /// than the layer's own (`device_op_fits`).
    DeviceOpLayout,
}

impl LayoutMismatch {
    /// Whether a constant differs.
    pub const fn found(self) -> bool {
        !matches!(self, LayoutMismatch::None)
    }
}

/// `layer_matches`, saying what differs first, in the order above.
pub const fn layout_mismatch<L: Layer>(
    width: Width,
    params: &[(&str, &[usize])],
    ready: ReadyOrder,
    op: Option<DeviceOp>,
) -> LayoutMismatch {
    if let Some(op) = op {
        if !same_op(L::DEVICE_OP, op) {
            return LayoutMismatch::DeviceOp;
        }
    }
    if !same_width(L::WIDTH, width) {
        return LayoutMismatch::Width;
    }
    if L::PARAMS.len() != params.len() {
        return LayoutMismatch::ParamCount;
    }
    let mut i = 0;
    while i < params.len() {
        if L::READY_ORDER.index(i, params.len()) != ready.index(i, params.len()) {
            return LayoutMismatch::ReadyOrder;
        }
        i += 1;
    }
    let mut i = 0;
    while i < params.len() {
        if !same_str(L::PARAMS[i].name, params[i].0) {
            return LayoutMismatch::Name(i);
        }
        if !same_dims(L::PARAMS[i].shape, params[i].1) {
            return LayoutMismatch::Shape(i);
        }
        i += 1;
    }
    if !device_op_fits::<L>() {
        return LayoutMismatch::DeviceOpLayout;
    }
    LayoutMismatch::None
}

/// Whether `L`'s parameters and widths are those the kernels of its `DEVICE_OP` read and write,
/// as the built-in layer of that op holds them: a layer of one's own that names a built-in's op
/// runs that built-in's kernels on the GPU, which must not reach past its parameters or rows.
const fn device_op_fits<L: Layer>() -> bool {
    use DeviceOp as D;
    match L::DEVICE_OP {
        D::Unsupported => true,
        // Element-wise: no parameters, as many features out as in.
        D::Relu | D::Gelu | D::Tanh | D::Sigmoid | D::Dropout => {
            L::PARAMS.is_empty()
                && match L::WIDTH {
                    Width::Preserving => true,
                    Width::Fixed { input, output } => input == output,
                }
        }
        D::Linear { input, output } => {
            fixed(L::WIDTH, input, output) && shapes_are(L::PARAMS, &[&[output, input], &[output]])
        }
        D::LayerNorm { width } => fixed(L::WIDTH, width, width) && shapes_are(L::PARAMS, &[&[width], &[width]]),
        D::CausalSelfAttention { width: d, heads } => {
            heads > 0
                && d % heads == 0
                && fixed(L::WIDTH, d, d)
                && shapes_are(L::PARAMS, &[&[3 * d, d], &[3 * d], &[d, d], &[d]])
        }
        D::Embedding { vocab, width } => fixed(L::WIDTH, 1, width) && shapes_are(L::PARAMS, &[&[vocab, width]]),
        D::PositionEmbedding { positions, width } => {
            fixed(L::WIDTH, width, width) && shapes_are(L::PARAMS, &[&[positions, width]])
        }
        D::TiedHead { input, output } => fixed(L::WIDTH, input, output) && L::PARAMS.is_empty(),
    }
}

/// `a == b`, in a `const fn`.
const fn same_width(a: Width, b: Width) -> bool {
    match (a, b) {
        (Width::Preserving, Width::Preserving) => true,
        (Width::Fixed { input: a, output: b }, Width::Fixed { input: c, output: d }) => a == c && b == d,
        _ => false,
    }
}

/// Whether `width` is `Width::Fixed { input, output }`.
const fn fixed(width: Width, input: usize, output: usize) -> bool {
    same_width(width, Width::Fixed { input, output })
}

/// `a == b`, in a `const fn`.
const fn same_dims(a: &[usize], b: &[usize]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut d = 0;
    while d < a.len() {
        if a[d] != b[d] {
            return false;
        }
        d += 1;
    }
    true
}

/// Whether `params` have exactly the shapes `shapes`, in order.
const fn shapes_are(params: &[ParamDef], shapes: &[&[usize]]) -> bool {
    if params.len() != shapes.len() {
        return false;
    }
    let mut i = 0;
    while i < shapes.len() {
        if !same_dims(params[i].shape, shapes[i]) {
            return false;
        }
        i += 1;
    }
    true
}

/// `a == b`, in a `const fn`.
const fn same_op(a: DeviceOp, b: DeviceOp) -> bool {
    use DeviceOp as D;
    match (a, b) {
        (D::Relu, D::Relu) | (D::Gelu, D::Gelu) | (D::Tanh, D::Tanh) | (D::Sigmoid, D::Sigmoid) => true,
        (D::Dropout, D::Dropout) => true,
        (D::LayerNorm { width: a }, D::LayerNorm { width: b }) => a == b,
        (D::Linear { input: a, output: b }, D::Linear { input: c, output: d })
        | (D::TiedHead { input: a, output: b }, D::TiedHead { input: c, output: d })
        | (D::CausalSelfAttention { width: a, heads: b }, D::CausalSelfAttention { width: c, heads: d })
        | (D::Embedding { vocab: a, width: b }, D::Embedding { vocab: c, width: d })
        | (D::PositionEmbedding { positions: a, width: b }, D::PositionEmbedding { positions: c, width: d }) => {
            a == c && b == d
        }
        _ => false,
    }
}

/// `a == b`, in a `const fn`.
const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    // Each from its own file: the layer module re-exports this one's items.
    use super::super::activation::{Gelu, Relu, Sigmoid, Tanh};
    use super::super::attention::CausalSelfAttention;
    use super::super::context::StepContext;
    use super::super::dropout::Dropout;
    use super::super::embedding::{Embedding, PositionEmbedding};
    use super::super::layer_norm::LayerNorm;
    use super::super::linear::Linear;
    use super::super::tied_head::TiedHead;
    use crate::init::InitRng;
    use crate::tensor::Matrix;

    #[test]
    fn every_built_in_layer_fits_its_own_device_op() {
        assert!(device_op_fits::<Linear<3, 2>>());
        assert!(device_op_fits::<LayerNorm<4>>());
        assert!(device_op_fits::<CausalSelfAttention<8, 2>>());
        assert!(device_op_fits::<Embedding<11, 4>>());
        assert!(device_op_fits::<PositionEmbedding<6, 4>>());
        assert!(device_op_fits::<TiedHead<4, 11>>());
        assert!(device_op_fits::<Relu>() && device_op_fits::<Gelu>() && device_op_fits::<Tanh>());
        assert!(device_op_fits::<Sigmoid>() && device_op_fits::<Dropout>());
    }

    /// A per-feature scale that claims ReLU's kernels, which would run on it as if it had no
    /// parameter.
    struct ClaimsRelu(Vec<f32>);

    impl Layer for ClaimsRelu {
        const PARAMS: &'static [ParamDef] = &[ParamDef { name: "weight", shape: &[4] }];
        const WIDTH: Width = Width::Preserving;
        const DEVICE_OP: DeviceOp = DeviceOp::Relu;
        type Saved = ();
        fn init(_: &mut InitRng) -> Self {
            ClaimsRelu(vec![1.0; 4])
        }
        fn param(&self, _: usize) -> &[f32] {
            &self.0
        }
        fn param_mut(&mut self, _: usize) -> &mut [f32] {
            &mut self.0
        }
        fn forward(&self, _: &StepContext, x: &Matrix, y: &mut Matrix, _: &mut ()) {
            y.clone_from(x);
        }
        fn backward(
            &self,
            _: &StepContext,
            _: &Matrix,
            _: &Matrix,
            _: &(),
            dy: &Matrix,
            _: &mut [&mut [f32]],
            _: bool,
            dx: Option<&mut Matrix>,
        ) {
            if let Some(dx) = dx {
                dx.clone_from(dy);
            }
        }
    }

    #[test]
    fn a_layer_of_ones_own_claiming_a_built_ins_kernels_must_have_its_parameters() {
        assert!(!device_op_fits::<ClaimsRelu>());
        let planned = layout_mismatch::<ClaimsRelu>(Width::Preserving, &[("weight", &[4])], ReadyOrder::Reverse, None);
        assert_eq!(planned, LayoutMismatch::DeviceOpLayout);
    }
}
