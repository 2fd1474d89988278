//! The compile-time check that a layer type's `Layer` constants are those the bucket schedule
//! was planned with (the macro emits one per field), and which constant differs when they are not.

use overlap_plan::{ReadyOrder, Width};

use super::contract::{DeviceOp, Layer};

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
    let same_width = match (L::WIDTH, width) {
        (Width::Preserving, Width::Preserving) => true,
        (Width::Fixed { input: a, output: b }, Width::Fixed { input: c, output: d }) => a == c && b == d,
        _ => false,
    };
    if !same_width {
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
        let (have, want) = (L::PARAMS[i].shape, params[i].1);
        if have.len() != want.len() {
            return LayoutMismatch::Shape(i);
        }
        let mut d = 0;
        while d < have.len() {
            if have[d] != want[d] {
                return LayoutMismatch::Shape(i);
            }
            d += 1;
        }
        i += 1;
    }
    LayoutMismatch::None
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
