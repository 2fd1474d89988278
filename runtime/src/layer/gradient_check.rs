//! A layer's `backward` against central finite differences of its own `forward`, for the built-in
//! layers' tests and for anyone writing a layer of their own (as `torch.autograd.gradcheck`):
//! a sign error or a missing term in `backward` trains silently, and is found here.
//!
//! The objective is `L = Σ output_i · r_i` for a fixed random `r`, so `grad_output = r`. Forward
//! runs in f32, hence a large step (1e-2 by default) and a tolerance of 1e-2 relative to
//! max(1, |numeric|).

use std::fmt;

use overlap_plan::Width;

use super::context::StepContext;
use super::contract::Layer;
use crate::init::InitRng;
use crate::tensor::Matrix;

/// Elements per tensor checked numerically; larger tensors are sampled with a stride.
const MAX_CHECKED: usize = 24;

/// How a layer's gradients are checked: the finite-difference step, the tolerance, the seed of
/// the random parameters and output weights, and whether the input has a gradient.
///
/// ```
/// use overlap_runtime::layer::{GradientCheck, Linear, Layer, StepContext};
/// use overlap_runtime::{InitRng, Matrix};
///
/// let layer = Linear::<5, 3>::init(&mut InitRng::new(1));
/// let input = Matrix::from_vec(4, 5, InitRng::new(2).uniform(20, 2.0));
/// let compared = GradientCheck::new().run(layer, &StepContext::rows(4), input).unwrap();
/// assert!(compared > 0);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct GradientCheck {
    step: f32,
    tolerance: f64,
    seed: u64,
    input_gradient: bool,
    redraw: bool,
}

impl Default for GradientCheck {
    fn default() -> Self {
        GradientCheck { step: 1e-2, tolerance: 1e-2, seed: 0, input_gradient: true, redraw: true }
    }
}

/// Where a layer's `backward` disagrees with the finite differences of its `forward`, or wrote
/// a gradient of another shape.
#[derive(Clone, Debug, PartialEq)]
pub enum GradientMismatch {
    /// `what` (`input[3]`, `weight[5]`, or `accumulated weight[5]` for a second backward that
    /// should have added to the first) is `analytic` where the finite difference says `numeric`.
    Value {
        /// The element, by parameter name (or `input`) and index.
        what: String,
        /// What `backward` wrote.
        analytic: f32,
        /// The central difference of the objective.
        numeric: f64,
    },
    /// `backward` wrote `value` into the input's gradient at `index`, where the input (token ids,
    /// `GradientCheck::parameters_only`) has none.
    Unexpected {
        /// The element of the input's gradient.
        index: usize,
        /// What `backward` wrote there.
        value: f32,
    },
    /// `backward` wrote an input gradient of another shape than the input's, or `forward` an
    /// output of another shape than its `WIDTH` says.
    Shape {
        /// Which tensor.
        what: &'static str,
        /// Its rows and columns.
        got: (usize, usize),
        /// The rows and columns it should have.
        expected: (usize, usize),
    },
}

impl fmt::Display for GradientMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GradientMismatch::Value { what, analytic, numeric } => {
                write!(f, "{what}: backward gives {analytic}, the finite difference of forward {numeric}")
            }
            GradientMismatch::Unexpected { index, value } => {
                write!(f, "input[{index}]: backward gives {value}, where the input has no gradient")
            }
            GradientMismatch::Shape { what, got, expected } => {
                write!(f, "{what} is {}x{}, not {}x{}", got.0, got.1, expected.0, expected.1)
            }
        }
    }
}

impl std::error::Error for GradientMismatch {}

impl GradientCheck {
    /// The defaults: step 1e-2, tolerance 1e-2, seed 0, parameters redrawn, the input's
    /// gradient checked.
    pub fn new() -> Self {
        Self::default()
    }

    /// The finite-difference step (default 1e-2: forward runs in f32). Must be positive.
    pub fn step(mut self, step: f32) -> Self {
        assert!(step > 0.0 && step.is_finite(), "GradientCheck: the step must be positive (got {step})");
        self.step = step;
        self
    }

    /// The tolerance, relative to max(1, |numeric|) (default 1e-2). Must be positive.
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        assert!(tolerance > 0.0, "GradientCheck: the tolerance must be positive (got {tolerance})");
        self.tolerance = tolerance;
        self
    }

    /// The seed of the parameters drawn and of the output's weights `r` (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Checks the parameters' gradients only, for a layer whose input has none (token ids: it
    /// must then write an input gradient of zeros, if any).
    pub fn parameters_only(mut self) -> Self {
        self.input_gradient = false;
        self
    }

    /// Keeps the layer's parameters as given. By default each is redrawn from U(-1, 1), so that
    /// values such as LayerNorm's unit gains or zero biases do not hide an error.
    pub fn keep_parameters(mut self) -> Self {
        self.redraw = false;
        self
    }

    /// Checks `layer` on `input` (rows grouped as `ctx` says): the input's gradient (unless
    /// `parameters_only`) and every parameter's, at most 24 elements of each tensor, spread over
    /// it; then that a second `backward` with `accumulate` adds to the gradients already there.
    /// Returns how many elements it compared. Keep inputs away from kinks (ReLU's 0) by more
    /// than the step.
    pub fn run<L: Layer>(&self, mut layer: L, ctx: &StepContext, mut input: Matrix) -> Result<usize, GradientMismatch> {
        let mut rng = InitRng::new(self.seed);
        if self.redraw {
            for i in 0..L::PARAMS.len() {
                let values = rng.uniform(L::PARAMS[i].numel(), 1.0);
                layer.param_mut(i).copy_from_slice(&values);
            }
        }
        let mut output = Matrix::default();
        layer.forward(ctx, &input, &mut output, &mut L::Saved::default());
        let cols = match L::WIDTH {
            Width::Fixed { output, .. } => output,
            Width::Preserving => input.cols(),
        };
        let (got, expected) = ((output.rows(), output.cols()), (input.rows(), cols));
        if got != expected {
            return Err(GradientMismatch::Shape { what: "the output (by its `WIDTH`)", got, expected });
        }
        let r = Matrix::from_vec(output.rows(), output.cols(), rng.uniform(output.as_slice().len(), 1.0));
        let mut grads: Vec<Vec<f32>> = L::PARAMS.iter().map(|p| vec![0.0; p.numel()]).collect();
        let grad_input = backward_into(&layer, ctx, &input, &r, &mut grads, false)?;
        let mut compared = 0;
        if self.input_gradient {
            let shape = (grad_input.rows(), grad_input.cols());
            let expected = (input.rows(), input.cols());
            if shape != expected {
                return Err(GradientMismatch::Shape { what: "the input's gradient", got: shape, expected });
            }
            for k in sampled(input.as_slice().len()) {
                let numeric = self.central(&mut layer, ctx, &mut input, r.as_slice(), Target::Input(k));
                self.close(format!("input[{k}]"), grad_input.as_slice()[k], numeric)?;
                compared += 1;
            }
        } else if let Some(index) = grad_input.as_slice().iter().position(|&g| g != 0.0) {
            return Err(GradientMismatch::Unexpected { index, value: grad_input.as_slice()[index] });
        }
        for (i, def) in L::PARAMS.iter().enumerate() {
            for k in sampled(def.numel()) {
                let numeric = self.central(&mut layer, ctx, &mut input, r.as_slice(), Target::Param(i, k));
                self.close(format!("{}[{k}]", def.name), grads[i][k], numeric)?;
                compared += 1;
            }
        }
        // Accumulating adds the fresh gradient onto whatever is there.
        let old: Vec<Vec<f32>> = L::PARAMS.iter().map(|p| rng.uniform(p.numel(), 1.0)).collect();
        let mut accumulated = old.clone();
        backward_into(&layer, ctx, &input, &r, &mut accumulated, true)?;
        for (i, def) in L::PARAMS.iter().enumerate() {
            for k in 0..def.numel() {
                // A product accumulating into C (beta 1) may fold C into its partial sums before
                // the last one, as oneMKL and OpenBLAS's AVX-512 kernels do: the same sum, rounded
                // in another order. Overwriting instead of adding is off by the old value itself.
                let (got, want) = (accumulated[i][k], old[i][k] + grads[i][k]);
                let scale = old[i][k].abs() + grads[i][k].abs();
                if (got - want).abs() > 1e-5 * scale {
                    let what = format!("accumulated {}[{k}]", def.name);
                    return Err(GradientMismatch::Value { what, analytic: got, numeric: f64::from(want) });
                }
            }
        }
        Ok(compared)
    }

    fn close(&self, what: String, analytic: f32, numeric: f64) -> Result<(), GradientMismatch> {
        let diff = (f64::from(analytic) - numeric).abs();
        if diff <= self.tolerance * numeric.abs().max(1.0) {
            Ok(())
        } else {
            Err(GradientMismatch::Value { what, analytic, numeric })
        }
    }

    /// Central difference of the objective in `target`, which is restored exactly afterwards.
    fn central<L: Layer>(
        &self,
        layer: &mut L,
        ctx: &StepContext,
        input: &mut Matrix,
        r: &[f32],
        target: Target,
    ) -> f64 {
        let original = *element(layer, input, target);
        *element(layer, input, target) = original + self.step;
        let plus = objective(layer, ctx, input, r);
        *element(layer, input, target) = original - self.step;
        let minus = objective(layer, ctx, input, r);
        *element(layer, input, target) = original;
        (plus - minus) / (2.0 * f64::from(self.step))
    }
}

/// `Σ output_i · r_i`, accumulated in f64 so the difference quotient is not drowned in
/// summation error.
fn objective<L: Layer>(layer: &L, ctx: &StepContext, input: &Matrix, r: &[f32]) -> f64 {
    let (mut output, mut saved) = (Matrix::default(), L::Saved::default());
    layer.forward(ctx, input, &mut output, &mut saved);
    output.as_slice().iter().zip(r).map(|(&y, &r)| f64::from(y) * f64::from(r)).sum()
}

/// One forward and one backward with `grad_output = r` into `grads`; the input's gradient.
fn backward_into<L: Layer>(
    layer: &L,
    ctx: &StepContext,
    input: &Matrix,
    r: &Matrix,
    grads: &mut [Vec<f32>],
    accumulate: bool,
) -> Result<Matrix, GradientMismatch> {
    let (mut output, mut saved) = (Matrix::default(), L::Saved::default());
    layer.forward(ctx, input, &mut output, &mut saved);
    let (got, expected) = ((output.rows(), output.cols()), (r.rows(), r.cols()));
    if got != expected {
        return Err(GradientMismatch::Shape { what: "the output of a second forward", got, expected });
    }
    let mut views: Vec<&mut [f32]> = grads.iter_mut().map(Vec::as_mut_slice).collect();
    let mut grad_input = Matrix::zeros(1, 1);
    layer.backward(ctx, input, &output, &saved, r, &mut views, accumulate, Some(&mut grad_input));
    Ok(grad_input)
}

/// Indices of at most `MAX_CHECKED` elements spread over `0..n`.
fn sampled(n: usize) -> impl Iterator<Item = usize> {
    (0..n).step_by(n.div_ceil(MAX_CHECKED).max(1))
}

/// One scalar the finite difference perturbs.
#[derive(Clone, Copy)]
enum Target {
    Input(usize),
    Param(usize, usize),
}

fn element<'a, L: Layer>(layer: &'a mut L, input: &'a mut Matrix, target: Target) -> &'a mut f32 {
    match target {
        Target::Input(k) => &mut input.as_mut_slice()[k],
        Target::Param(i, k) => &mut layer.param_mut(i)[k],
    }
}
