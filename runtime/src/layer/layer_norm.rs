//! Layer normalisation over the feature dimension, with PyTorch's defaults (eps 1e-5,
//! elementwise affine, weight ones, bias zeros).

use overlap_plan::{ReadyOrder, Width};

use super::context::StepContext;
use super::contract::{assert_not_lent, DeviceOp, Layer, ParamDef};
use super::lanes;
use super::scratch::with_scratch;
use super::weight_bias::weight_or_bias;
use crate::init::InitRng;
use crate::tensor::Matrix;

/// Partial sums per row in backward, so that its reductions vectorise.
const LANES: usize = 8;

/// Added to the variance before the square root, as PyTorch's default.
const EPS: f32 = 1e-5;

/// Normalises each row of `D` features to zero mean and unit variance, then scales by `weight`
/// and shifts by `bias`.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm<const D: usize> {
    /// `[D]`, initialised to ones.
    pub weight: Vec<f32>,
    /// `[D]`, initialised to zeros.
    pub bias: Vec<f32>,
}

/// Per-row statistics from `forward`, kept so `backward` need not recompute them. The vectors
/// are resized, not reallocated, from step to step.
#[derive(Clone, Debug, Default)]
pub struct LayerNormSaved {
    mean: Vec<f32>,
    rstd: Vec<f32>,
}

impl LayerNormSaved {
    /// Mean of each input row.
    pub fn mean(&self) -> &[f32] {
        &self.mean
    }

    /// `1 / sqrt(var + eps)` of each input row (biased variance, as PyTorch).
    pub fn rstd(&self) -> &[f32] {
        &self.rstd
    }
}

impl<const D: usize> Layer for LayerNorm<D> {
    const PARAMS: &'static [ParamDef] =
        &[ParamDef { name: "weight", shape: &[D] }, ParamDef { name: "bias", shape: &[D] }];
    const WIDTH: Width = Width::Fixed { input: D, output: D };
    /// `NativeLayerNormBackward0` readies weight, then bias (observed in PyTorch).
    const READY_ORDER: ReadyOrder = ReadyOrder::Definition;
    type Saved = LayerNormSaved;
    const DEVICE_OP: DeviceOp = DeviceOp::LayerNorm { width: D };

    /// PyTorch's defaults; `rng` is unused since nothing is random.
    fn init(_rng: &mut InitRng) -> Self {
        LayerNorm { weight: vec![1.0; D], bias: vec![0.0; D] }
    }

    fn param(&self, index: usize) -> &[f32] {
        weight_or_bias("LayerNorm", index, &self.weight, &self.bias)
    }

    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        weight_or_bias("LayerNorm", index, &mut self.weight, &mut self.bias)
    }

    fn param_vec_mut(&mut self, index: usize) -> Option<&mut Vec<f32>> {
        Some(weight_or_bias("LayerNorm", index, &mut self.weight, &mut self.bias))
    }

    fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, saved: &mut LayerNormSaved) {
        assert_eq!(input.cols(), D, "LayerNorm<{D}>: input has {} columns", input.cols());
        assert_not_lent("LayerNorm", self.weight.len() == D && self.bias.len() == D);
        let rows = input.rows();
        output.resize(rows, D);
        saved.mean.resize(rows, 0.0);
        saved.rstd.resize(rows, 0.0);
        let n = D as f32;
        for r in 0..rows {
            let x = input.row(r);
            // Two passes: subtracting the mean first avoids the cancellation of E[x²] - E[x]².
            let mean = lanes::sum(x) / n;
            let var = lanes::squared_deviations(x, mean) / n;
            let rstd = 1.0 / (var + EPS).sqrt();
            saved.mean[r] = mean;
            saved.rstd[r] = rstd;
            let y = output.row_mut(r);
            for (((y, &x), &w), &b) in y.iter_mut().zip(x).zip(&self.weight).zip(&self.bias) {
                *y = (x - mean) * rstd * w + b;
            }
        }
    }

    fn backward(
        &self,
        _ctx: &StepContext,
        input: &Matrix,
        _output: &Matrix,
        saved: &LayerNormSaved,
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        assert_not_lent("LayerNorm", self.weight.len() == D && self.bias.len() == D);
        let rows = input.rows();
        assert!(
            input.cols() == D
                && grad_output.rows() == rows
                && grad_output.cols() == D
                && saved.mean.len() == rows
                && saved.rstd.len() == rows,
            "LayerNorm<{D}>: the input ({rows}x{}), grad_output ({}x{}) or saved statistics ({} and {} rows) do not \
             match a {rows}x{D} input",
            input.cols(),
            grad_output.rows(),
            grad_output.cols(),
            saved.mean.len(),
            saved.rstd.len()
        );
        let [grad_weight, grad_bias] = grads else {
            panic!("LayerNorm backward needs 2 gradient slices, got {}", grads.len());
        };
        assert!(grad_weight.len() == D && grad_bias.len() == D, "LayerNorm<{D}>: gradient slices must have {D} values");
        let (x, dy) = (input.as_slice(), grad_output.as_slice());
        // Last parameter first, as `Layer::backward` states: each column's sum over the rows in
        // row order, formed apart and then written or added (as `column_sums` does), the rows
        // read whole.
        with_scratch([D, D], |[sum_bias, sum_weight]| {
            sum_bias.fill(0.0);
            sum_weight.fill(0.0);
            let sum_bias: &mut [f32; D] = sum_bias.try_into().expect("scratch of D values");
            let sum_weight: &mut [f32; D] = sum_weight.try_into().expect("scratch of D values");
            for ((xr, dyr), (&mean, &rstd)) in
                x.chunks_exact(D).zip(dy.chunks_exact(D)).zip(saved.mean.iter().zip(&saved.rstd))
            {
                let (xr, dyr) = (xr.try_into().expect("rows of D"), dyr.try_into().expect("rows of D"));
                add_row_terms(sum_bias, sum_weight, xr, dyr, mean, rstd);
            }
            for (dst, sums) in [(&mut **grad_bias, &*sum_bias), (&mut **grad_weight, &*sum_weight)] {
                for (d, &s) in dst.iter_mut().zip(sums) {
                    *d = if accumulate { *d + s } else { s };
                }
            }
        });

        let Some(grad_input) = grad_input else { return };
        grad_input.resize(rows, D);
        let n = D as f32;
        for r in 0..rows {
            let (xr, dyr, mean, rstd) = (&x[r * D..(r + 1) * D], &dy[r * D..(r + 1) * D], saved.mean[r], saved.rstd[r]);
            // With g = dy·w: dx = rstd·(g - mean(g) - x̂·mean(g·x̂)).
            let (sum_g, sum_g_xhat) = gradient_sums::<D>(
                xr.try_into().expect("rows of D"),
                dyr.try_into().expect("rows of D"),
                self.weight.as_slice().try_into().expect("a weight of D"),
                mean,
                rstd,
            );
            let (mean_g, mean_g_xhat) = (sum_g / n, sum_g_xhat / n);
            for (((dx, &xv), &g), &w) in grad_input.row_mut(r).iter_mut().zip(xr).zip(dyr).zip(&self.weight) {
                *dx = rstd * (g * w - mean_g - ((xv - mean) * rstd) * mean_g_xhat);
            }
        }
    }
}

/// Adds one row's terms to the bias and weight gradients' column sums: `dy` and `dy·x̂`. Arrays
/// of `D` passed apart, so that the compiler knows their lengths and that they do not overlap,
/// and vectorises the loop (within the caller, it ran one column at a time).
#[inline(always)]
fn add_row_terms<const D: usize>(
    sum_bias: &mut [f32; D],
    sum_weight: &mut [f32; D],
    x: &[f32; D],
    dy: &[f32; D],
    mean: f32,
    rstd: f32,
) {
    for c in 0..D {
        sum_bias[c] += dy[c];
        sum_weight[c] += dy[c] * ((x[c] - mean) * rstd);
    }
}

/// A row's `Σ g` and `Σ g·x̂`, with `g = dy·w`: each in `LANES` partial sums (element `c` in lane
/// `c % LANES`, the tail in lane 0), added in order at the end. One loop per sum over arrays of
/// `D`, so that each vectorises whole (formed together, the compiler paired the two sums'
/// lanes in 2-wide vectors).
#[inline(always)]
fn gradient_sums<const D: usize>(x: &[f32; D], dy: &[f32; D], w: &[f32; D], mean: f32, rstd: f32) -> (f32, f32) {
    let (mut sum_g, mut sum_g_xhat) = ([0.0f32; LANES], [0.0f32; LANES]);
    for start in (0..D / LANES).map(|k| k * LANES) {
        for (l, sum) in sum_g.iter_mut().enumerate() {
            *sum += dy[start + l] * w[start + l];
        }
    }
    for start in (0..D / LANES).map(|k| k * LANES) {
        for (l, sum) in sum_g_xhat.iter_mut().enumerate() {
            let c = start + l;
            *sum += (dy[c] * w[c]) * ((x[c] - mean) * rstd);
        }
    }
    for c in D - D % LANES..D {
        let g = dy[c] * w[c];
        sum_g[0] += g;
        sum_g_xhat[0] += g * ((x[c] - mean) * rstd);
    }
    (sum_g.iter().sum(), sum_g_xhat.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sums formed one column at a time in the documented order (`gradient_sums`: element
    /// `c` into lane `c % LANES` for the whole lanes, the rest into lane 0, the lanes added in
    /// order; `add_row_terms`: each column over the rows in order), to the bit, at widths with
    /// and without a tail and below one lane's width.
    fn sums_match_the_scalar_order<const D: usize>() {
        let value = |i: usize| ((i * 7919 % 211) as f32 - 105.0) * 1.07f32.powi((i % 23) as i32);
        let rows: Vec<([f32; D], [f32; D])> = (0..5)
            .map(|r| (std::array::from_fn(|c| value(r * 31 + c)), std::array::from_fn(|c| value(r * 17 + c + 3))))
            .collect();
        let w: [f32; D] = std::array::from_fn(|c| value(c + 11) / 50.0);
        let (mean, rstd) = (0.3f32, 1.7f32);
        let (mut bias, mut weight) = ([0.0f32; D], [0.0f32; D]);
        for (x, dy) in &rows {
            add_row_terms(&mut bias, &mut weight, x, dy, mean, rstd);
            let (sum_g, sum_g_xhat) = gradient_sums::<D>(x, dy, &w, mean, rstd);
            let (mut lanes_g, mut lanes_gx) = ([0.0f32; LANES], [0.0f32; LANES]);
            for c in 0..D {
                let lane = if c < D - D % LANES { c % LANES } else { 0 };
                lanes_g[lane] += dy[c] * w[c];
                lanes_gx[lane] += (dy[c] * w[c]) * ((x[c] - mean) * rstd);
            }
            let in_order = |lanes: [f32; LANES]| lanes.iter().fold(0.0f32, |s, &v| s + v);
            assert_eq!(sum_g.to_bits(), in_order(lanes_g).to_bits(), "Σg, D = {D}");
            assert_eq!(sum_g_xhat.to_bits(), in_order(lanes_gx).to_bits(), "Σg·x̂, D = {D}");
        }
        for c in 0..D {
            let column =
                |term: &dyn Fn(&[f32; D], &[f32; D]) -> f32| rows.iter().fold(0.0f32, |s, (x, dy)| s + term(x, dy));
            assert_eq!(bias[c].to_bits(), column(&|_, dy| dy[c]).to_bits(), "bias column {c}, D = {D}");
            let xhat = |x: &[f32; D], dy: &[f32; D]| dy[c] * ((x[c] - mean) * rstd);
            assert_eq!(weight[c].to_bits(), column(&xhat).to_bits(), "weight column {c}, D = {D}");
        }
    }

    #[test]
    fn gradient_sums_keep_their_order_at_every_width() {
        sums_match_the_scalar_order::<5>();
        sums_match_the_scalar_order::<8>();
        sums_match_the_scalar_order::<13>();
        sums_match_the_scalar_order::<128>();
    }

    #[test]
    fn forward_normalises_rows() {
        let layer = LayerNorm::<4>::init(&mut InitRng::new(0));
        let input = Matrix::from_vec(2, 4, vec![1.0, 2.0, 3.0, 4.0, -5.0, 0.0, 5.0, 10.0]);
        let (mut output, mut saved) = (Matrix::default(), LayerNormSaved::default());
        layer.forward(&StepContext::rows(input.rows()), &input, &mut output, &mut saved);
        assert_eq!(saved.mean(), [2.5, 2.5]);
        // Row 0 has variance 1.25; rstd = 1/sqrt(1.25 + 1e-5).
        assert!((saved.rstd()[0] - 0.894_423_6).abs() < 1e-6);
        for r in 0..2 {
            let row = output.row(r);
            let mean: f32 = row.iter().sum::<f32>() / 4.0;
            let var: f32 = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 4.0;
            assert!(mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-4, "row {r}: mean {mean}, var {var}");
        }
    }

    #[test]
    fn forward_applies_affine() {
        let layer = LayerNorm::<2> { weight: vec![2.0, 3.0], bias: vec![0.5, -0.5] };
        let input = Matrix::from_vec(1, 2, vec![-1.0, 1.0]);
        let (mut output, mut saved) = (Matrix::default(), LayerNormSaved::default());
        layer.forward(&StepContext::rows(input.rows()), &input, &mut output, &mut saved);
        // x̂ = ±1/sqrt(1 + 1e-5).
        let xhat = 1.0 / (1.0f32 + 1e-5).sqrt();
        assert_eq!(output.as_slice(), [-2.0 * xhat + 0.5, 3.0 * xhat - 0.5]);
    }
}
