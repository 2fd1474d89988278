//! The shape checks of the host program: what a layer's forward or backward gets and writes
//! must fit what the model's layers chain together, and a mistake in a loop of one's own (a
//! backward before any forward) is named as that rather than as a layer's shape.

use overlap_plan::Width;

use crate::layer::Layer;
use crate::tensor::Matrix;

/// A layer's output is one row per input row, of the width its `WIDTH` says: checked after each
/// forward, so that a layer of one's own that writes another shape is named, not the layer after
/// it that reads the output.
pub(super) fn output_fits<L: Layer>(index: usize, x: &Matrix, y: &Matrix) {
    let cols = match L::WIDTH {
        Width::Fixed { output, .. } => output,
        Width::Preserving => x.cols(),
    };
    assert!(
        (y.rows(), y.cols()) == (x.rows(), cols),
        "layer {index} ({}): forward wrote a {}x{} output for a {}x{} input; its `WIDTH` says {}x{cols}",
        std::any::type_name::<L>(),
        y.rows(),
        y.cols(),
        x.rows(),
        x.cols(),
        x.rows()
    );
}

/// Panics unless the gradient reaching layer `index` has the shape of the output its forward
/// kept: one of another shape is a caller's bug, and one for a workspace no forward has filled
/// (backward before forward, in a loop of one's own) is named as that.
pub(super) fn gradient_fits_output<L>(index: usize, y: &Matrix, dy: &Matrix) {
    if (dy.rows(), dy.cols()) != (y.rows(), y.cols()) {
        let hint = if y.rows() == 0 { ": no forward has run on this workspace (call `forward` first)" } else { "" };
        panic!(
            "layer {index} ({}): backward got a {}x{} gradient for a {}x{} output{hint}",
            std::any::type_name::<L>(),
            dy.rows(),
            dy.cols(),
            y.rows(),
            y.cols()
        );
    }
}

/// The gradient a layer's backward writes for its input has the input's shape.
pub(super) fn input_gradient_fits<L: Layer>(index: usize, x: &Matrix, dx: Option<&Matrix>) {
    if let Some(dx) = dx {
        assert!(
            (dx.rows(), dx.cols()) == (x.rows(), x.cols()),
            "layer {index} ({}): backward wrote a {}x{} gradient for a {}x{} input",
            std::any::type_name::<L>(),
            dx.rows(),
            dx.cols(),
            x.rows(),
            x.cols()
        );
    }
}
