//! Element-wise activations. They have no parameters and keep the width, so one macro writes
//! the four `Layer` impls from a value function and a derivative.

use overlap_plan::Width;

use super::context::StepContext;
use super::contract::{DeviceOp, Layer, ParamDef};
use super::tanh::tanh;
use crate::init::InitRng;
use crate::tensor::Matrix;

/// `sqrt(2/π)`, the tanh-approximation GELU's scale.
const GELU_SCALE: f32 = 0.797_884_6;
/// Cubic coefficient of the tanh-approximation GELU.
const GELU_CUBIC: f32 = 0.044_715;

#[inline(always)]
fn gelu(x: f32) -> f32 {
    let u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    0.5 * x * (1.0 + tanh(u))
}

#[inline(always)]
fn gelu_derivative(x: f32) -> f32 {
    let u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    let t = tanh(u);
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_SCALE * (1.0 + 3.0 * GELU_CUBIC * x * x)
}

fn sigmoid(x: f32) -> f32 {
    // For very negative x, exp(-x) overflows to inf and the result is the correct limit, 0.
    1.0 / (1.0 + (-x).exp())
}

/// Defines a parameterless, width-preserving activation from `|x| value` and
/// `|x, y| derivative`; the derivative sees input and output, so each activation uses whichever
/// is cheaper. The expressions are pasted into the loops, so they inline without relying on the
/// optimiser to see through function pointers.
macro_rules! activation {
    (
        $(#[$doc:meta])* $name:ident,
        |$x:ident| $value:expr,
        |$dx_in:ident, $dx_out:ident| $derivative:expr
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name;

        impl Layer for $name {
            const PARAMS: &'static [ParamDef] = &[];
            const WIDTH: Width = Width::Preserving;
            type Saved = ();
            const DEVICE_OP: DeviceOp = DeviceOp::$name;

            fn init(_rng: &mut InitRng) -> Self {
                $name
            }

            fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _saved: &mut ()) {
                output.resize(input.rows(), input.cols());
                for (y, &$x) in output.as_mut_slice().iter_mut().zip(input.as_slice()) {
                    *y = $value;
                }
            }

            fn backward(
                &self,
                _ctx: &StepContext,
                input: &Matrix,
                output: &Matrix,
                _saved: &(),
                grad_output: &Matrix,
                grads: &mut [&mut [f32]],
                _accumulate: bool,
                grad_input: Option<&mut Matrix>,
            ) {
                debug_assert!(grads.is_empty(), "{} has no parameter gradients", stringify!($name));
                let Some(grad_input) = grad_input else { return };
                let shape = (input.rows(), input.cols());
                assert!(
                    (grad_output.rows(), grad_output.cols()) == shape
                        && (output.rows(), output.cols()) == shape,
                    "{}: output or grad_output does not match the input shape",
                    stringify!($name)
                );
                grad_input.resize(shape.0, shape.1);
                let values = input.as_slice().iter().zip(output.as_slice());
                let gradients = grad_input.as_mut_slice().iter_mut().zip(grad_output.as_slice());
                for ((grad_in, &grad_out), (&$dx_in, &$dx_out)) in gradients.zip(values) {
                    *grad_in = grad_out * $derivative;
                }
            }
        }
    };
}

activation!(
    /// `max(x, 0)`; the gradient at 0 is 0, and NaN stays NaN with gradient 1, as in PyTorch
    /// (`f32::max` would turn NaN into 0: a NaN input would then vanish from the loss while
    /// backward still carried it into the weights).
    Relu,
    |x| if x <= 0.0 { 0.0 } else { x },
    |_x, y| if y <= 0.0 { 0.0 } else { 1.0 }
);

activation!(
    /// GELU as PyTorch's `approximate='tanh'`:
    /// `0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))`.
    Gelu,
    |x| gelu(x),
    |x, _y| gelu_derivative(x)
);

activation!(
    /// Hyperbolic tangent; the derivative `1 - y²` reuses the saved output.
    Tanh,
    |x| x.tanh(),
    |_x, y| 1.0 - y * y
);

activation!(
    /// Logistic sigmoid; the derivative `y·(1 - y)` reuses the saved output.
    Sigmoid,
    |x| sigmoid(x),
    |_x, y| y * (1.0 - y)
);

#[cfg(test)]
mod tests {
    use super::*;

    fn apply<L: Layer<Saved = ()>>(layer: L, xs: &[f32]) -> Vec<f32> {
        let input = Matrix::from_vec(1, xs.len(), xs.to_vec());
        let mut output = Matrix::default();
        layer.forward(&StepContext::rows(input.rows()), &input, &mut output, &mut ());
        output.into_vec()
    }

    fn assert_close(got: &[f32], want: &[f32]) {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-6, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn values_match_reference() {
        // References evaluated in f64 from the defining formulas.
        assert_eq!(apply(Relu, &[-2.0, 0.0, 3.5]), [0.0, 0.0, 3.5]);
        assert_close(&apply(Gelu, &[-1.0, 0.0, 1.0, 2.0]), &[-0.158_808, 0.0, 0.841_192, 1.954_598]);
        assert_close(&apply(Tanh, &[-1.0, 0.0, 0.5]), &[-0.761_594_2, 0.0, 0.462_117_2]);
        assert_close(&apply(Sigmoid, &[-1.0, 0.0, 2.0]), &[0.268_941_4, 0.5, 0.880_797_1]);
        assert_eq!(apply(Sigmoid, &[-200.0, 200.0]), [0.0, 1.0]);
    }

    #[test]
    fn backward_keeps_input_shape() {
        let input = Matrix::from_vec(2, 3, vec![1.0, -1.0, 2.0, -2.0, 0.5, -0.5]);
        let mut output = Matrix::default();
        Relu.forward(&StepContext::rows(input.rows()), &input, &mut output, &mut ());
        let mut grad_input = Matrix::zeros(7, 1);
        Relu.backward(
            &StepContext::rows(input.rows()),
            &input,
            &output,
            &(),
            &Matrix::from_vec(2, 3, vec![1.0; 6]),
            &mut [],
            false,
            Some(&mut grad_input),
        );
        assert_eq!(grad_input, Matrix::from_vec(2, 3, vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0]));
    }

    #[test]
    fn relu_keeps_nan_with_gradient_one_as_pytorch() {
        // PyTorch 2.15: relu([nan, -1, 0, 2]) = [nan, 0, 0, 2], its gradient [1, 0, 0, 1].
        let input = Matrix::from_vec(1, 4, vec![f32::NAN, -1.0, 0.0, 2.0]);
        let mut output = Matrix::default();
        Relu.forward(&StepContext::rows(1), &input, &mut output, &mut ());
        assert!(output.as_slice()[0].is_nan());
        assert_eq!(output.as_slice()[1..], [0.0, 0.0, 2.0]);
        let mut grad_input = Matrix::default();
        let ones = Matrix::from_vec(1, 4, vec![1.0; 4]);
        Relu.backward(&StepContext::rows(1), &input, &output, &(), &ones, &mut [], false, Some(&mut grad_input));
        assert_eq!(grad_input.as_slice(), [1.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    #[should_panic(expected = "Tanh has no parameters; index 0 is out of range")]
    fn param_panics() {
        Tanh.param(0);
    }
}
