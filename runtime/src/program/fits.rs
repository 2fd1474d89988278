//! The shape checks of the host program: what a layer's forward or backward gets and writes
//! must fit what the model's layers chain together, and a mistake in a loop of one's own (a
//! backward before any forward) is named as that rather than as a layer's shape. A failed check
//! names the layer by its path in the model (`blocks.2.fc`), its index and its type; the name is
//! made only then, so that a step allocates nothing for it.

use std::fmt;

use overlap_plan::Width;

use crate::layer::{assert_not_lent, Layer};
use crate::tensor::Matrix;

/// A layer as a failed check names it.
pub(super) struct Shown {
    /// Its path in the model, where the device knows the model's schedule.
    pub path: Option<String>,
    /// Its place among the model's layers.
    pub index: usize,
    /// Its type, as `std::any::type_name` writes it.
    pub ty: &'static str,
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "layer `{path}` ({}, layer {})", self.ty, self.index),
            None => write!(f, "layer {} ({})", self.index, self.ty),
        }
    }
}

/// A layer's input has the columns its `WIDTH` takes: checked before each forward, so that an
/// input of the wrong width given to a model (in a loop of one's own) is named at the layer that
/// reads it, with its path, rather than by that layer's own assertion.
pub(super) fn input_fits<L: Layer>(layer: impl FnOnce() -> Shown, x: &Matrix) {
    if let Width::Fixed { input, .. } = L::WIDTH {
        if x.cols() != input {
            panic!("{}: forward got a {}x{} input; its `WIDTH` takes {input} columns", layer(), x.rows(), x.cols());
        }
    }
}

/// A layer's output is one row per input row, of the width its `WIDTH` says: checked after each
/// forward, so that a layer of one's own that writes another shape is named, not the layer after
/// it that reads the output.
pub(super) fn output_fits<L: Layer>(layer: impl FnOnce() -> Shown, x: &Matrix, y: &Matrix) {
    let cols = match L::WIDTH {
        Width::Fixed { output, .. } => output,
        Width::Preserving => x.cols(),
    };
    if (y.rows(), y.cols()) != (x.rows(), cols) {
        panic!(
            "{}: forward wrote a {}x{} output for a {}x{} input; its `WIDTH` says {}x{cols}",
            layer(),
            y.rows(),
            y.cols(),
            x.rows(),
            x.cols(),
            x.rows()
        );
    }
}

/// Panics unless a layer holds every one of its parameters: one lent to its bucket's collective
/// (`Layer::param_vec_mut`) is empty until the step gives it back, and a layer of one's own that
/// lends would read nothing, where the built-in layers check it themselves.
pub(super) fn params_home<L: Layer>(layer: &L, shown: impl FnOnce() -> Shown) {
    let holds_all = L::PARAMS.iter().enumerate().all(|(i, def)| layer.param(i).len() == def.numel());
    if !holds_all {
        assert_not_lent(&shown().to_string(), false);
    }
}

/// Panics unless the gradient reaching a layer has the shape of the output its forward kept:
/// one of another shape is a caller's bug, and one for a workspace no forward has filled
/// (backward before forward, in a loop of one's own) is named as that.
pub(super) fn gradient_fits_output(layer: impl FnOnce() -> Shown, y: &Matrix, dy: &Matrix) {
    if (dy.rows(), dy.cols()) != (y.rows(), y.cols()) {
        let hint = if y.rows() == 0 { ": no forward has run on this workspace (call `forward` first)" } else { "" };
        panic!(
            "{}: backward got a {}x{} gradient for a {}x{} output{hint}",
            layer(),
            dy.rows(),
            dy.cols(),
            y.rows(),
            y.cols()
        );
    }
}

/// The gradient a layer's backward writes for its input has the input's shape.
pub(super) fn input_gradient_fits(layer: impl FnOnce() -> Shown, x: &Matrix, dx: Option<&Matrix>) {
    if let Some(dx) = dx {
        if (dx.rows(), dx.cols()) != (x.rows(), x.cols()) {
            panic!(
                "{}: backward wrote a {}x{} gradient for a {}x{} input",
                layer(),
                dx.rows(),
                dx.cols(),
                x.rows(),
                x.cols()
            );
        }
    }
}
