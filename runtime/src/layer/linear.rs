//! Fully connected layer, `y = x·Wᵀ + b`, with PyTorch's parameter layout and initialisation.

use overlap_plan::Width;

use super::context::StepContext;
use super::contract::{assert_not_lent, DeviceOp, Layer, ParamDef};
use super::weight_bias::weight_or_bias;
use crate::host::gemm::{gemm, MatRef};
use crate::init::InitRng;
use crate::tensor::Matrix;

/// `IN -> OUT` affine map. Widths are const generics so the macro can check them at compile
/// time against the planned schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Linear<const IN: usize, const OUT: usize> {
    /// `[OUT, IN]`, row-major (PyTorch's layout, so checkpoints map one to one).
    pub weight: Vec<f32>,
    /// `[OUT]`.
    pub bias: Vec<f32>,
}

impl<const IN: usize, const OUT: usize> Layer for Linear<IN, OUT> {
    const PARAMS: &'static [ParamDef] =
        &[ParamDef { name: "weight", shape: &[OUT, IN] }, ParamDef { name: "bias", shape: &[OUT] }];
    const WIDTH: Width = Width::Fixed { input: IN, output: OUT };
    type Saved = ();
    const DEVICE_OP: DeviceOp = DeviceOp::Linear { input: IN, output: OUT };

    /// PyTorch's `nn.Linear` default: both tensors from U(-1/sqrt(IN), 1/sqrt(IN)).
    fn init(rng: &mut InitRng) -> Self {
        let bound = 1.0 / (IN as f32).sqrt();
        let weight = rng.uniform(OUT * IN, bound);
        let bias = rng.uniform(OUT, bound);
        Linear { weight, bias }
    }

    fn param(&self, index: usize) -> &[f32] {
        weight_or_bias("Linear", index, &self.weight, &self.bias)
    }

    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        weight_or_bias("Linear", index, &mut self.weight, &mut self.bias)
    }

    fn param_vec_mut(&mut self, index: usize) -> Option<&mut Vec<f32>> {
        Some(weight_or_bias("Linear", index, &mut self.weight, &mut self.bias))
    }

    fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _saved: &mut ()) {
        assert_eq!(input.cols(), IN, "Linear<{IN}, {OUT}>: input has {} columns", input.cols());
        assert_not_lent("Linear", self.weight.len() == OUT * IN && self.bias.len() == OUT);
        let rows = input.rows();
        output.resize(rows, OUT);
        // Seed every row with the bias and let gemm accumulate onto it: one pass over `output`.
        for r in 0..rows {
            output.row_mut(r).copy_from_slice(&self.bias);
        }
        let x = MatRef::row_major(input.as_slice(), rows, IN);
        let w_t = MatRef::row_major(&self.weight, OUT, IN).t();
        gemm(1.0, x, w_t, 1.0, output.as_mut_slice(), rows, OUT);
    }

    fn backward(
        &self,
        _ctx: &StepContext,
        input: &Matrix,
        _output: &Matrix,
        _saved: &(),
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        assert_not_lent("Linear", self.weight.len() == OUT * IN && self.bias.len() == OUT);
        let rows = input.rows();
        assert!(
            grad_output.rows() == rows && grad_output.cols() == OUT,
            "Linear<{IN}, {OUT}>: grad_output is {}x{}, expected {rows}x{OUT}",
            grad_output.rows(),
            grad_output.cols()
        );
        let [grad_weight, grad_bias] = grads else {
            panic!("Linear backward needs 2 gradient slices, got {}", grads.len());
        };
        let x = MatRef::row_major(input.as_slice(), rows, IN);
        let dy_view = MatRef::row_major(grad_output.as_slice(), rows, OUT);

        // db = column sums of dy; first, as `Layer::backward` states (last parameter first).
        assert_eq!(grad_bias.len(), OUT, "Linear<{IN}, {OUT}>: bias gradient has {} values", grad_bias.len());
        column_sums(grad_bias, grad_output.as_slice(), accumulate);

        // dW += dyᵀ·x, also at the first micro-step: gradients start every step cleared (see
        // `Layer::backward`), and OpenBLAS with beta 1 skips the pass over dW that clearing it
        // itself would take (see `crate::host::gemm`).
        gemm(1.0, dy_view.t(), x, 1.0, grad_weight, OUT, IN);

        if let Some(grad_input) = grad_input {
            grad_input.resize(rows, IN);
            let w = MatRef::row_major(&self.weight, OUT, IN);
            gemm(1.0, dy_view, w, 0.0, grad_input.as_mut_slice(), rows, IN);
        }
    }
}

/// Columns reduced together: the block's partial sums live on the stack and the rows are read
/// contiguously, so there is no scratch buffer and no strided access.
const SUM_BLOCK: usize = 64;

/// Writes (or, with `accumulate`, adds) into `dst[c]` the sum of column `c` of `src`, a row-major
/// matrix of `dst.len()` columns, over its rows in order. Each sum is formed before it touches
/// `dst`, so accumulating adds exactly the fresh sum to the old value.
pub(super) fn column_sums(dst: &mut [f32], src: &[f32], accumulate: bool) {
    let cols = dst.len();
    if cols == 0 {
        return;
    }
    assert_eq!(src.len() % cols, 0, "column_sums: {} values are not rows of {cols}", src.len());
    for (b, block) in dst.chunks_mut(SUM_BLOCK).enumerate() {
        let start = b * SUM_BLOCK;
        let mut sums = [0.0f32; SUM_BLOCK];
        if block.len() == SUM_BLOCK {
            // A whole block: its length known, so the sums stay in vector registers.
            for row in src.chunks_exact(cols) {
                let row: &[f32; SUM_BLOCK] = row[start..start + SUM_BLOCK].try_into().expect("a whole block");
                for (s, &x) in sums.iter_mut().zip(row) {
                    *s += x;
                }
            }
        } else {
            for row in src.chunks_exact(cols) {
                for (s, &x) in sums[..block.len()].iter_mut().zip(&row[start..]) {
                    *s += x;
                }
            }
        }
        for (d, &sum) in block.iter_mut().zip(&sums) {
            *d = if accumulate { *d + sum } else { sum };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_matches_hand_computation() {
        let layer = Linear::<2, 3> { weight: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], bias: vec![0.5, -1.0, 0.0] };
        let input = Matrix::from_vec(2, 2, vec![1.0, 0.0, -1.0, 2.0]);
        let mut output = Matrix::default();
        layer.forward(&StepContext::rows(input.rows()), &input, &mut output, &mut ());
        // Row 0: [1, 3, 5] + b; row 1: [-1+4, -3+8, -5+12] + b.
        assert_eq!(output, Matrix::from_vec(2, 3, vec![1.5, 2.0, 5.0, 3.5, 4.0, 7.0]));
    }

    #[test]
    fn forward_matches_a_direct_sum() {
        let mut rng = InitRng::new(3);
        let layer = Linear::<11, 37>::init(&mut rng);
        let input = Matrix::from_vec(5, 11, rng.uniform(5 * 11, 1.0));
        let mut output = Matrix::default();
        layer.forward(&StepContext::rows(input.rows()), &input, &mut output, &mut ());
        for r in 0..5 {
            for c in 0..37 {
                let direct: f32 =
                    layer.bias[c] + (0..11).map(|k| input.row(r)[k] * layer.weight[c * 11 + k]).sum::<f32>();
                assert!((output.row(r)[c] - direct).abs() <= 1e-5, "({r}, {c}): {} vs {direct}", output.row(r)[c]);
            }
        }
    }

    #[test]
    fn backward_matches_hand_computation() {
        let layer = Linear::<2, 1> { weight: vec![3.0, -2.0], bias: vec![1.0] };
        let input = Matrix::from_vec(2, 2, vec![1.0, 2.0, 3.0, 4.0]);
        let grad_output = Matrix::from_vec(2, 1, vec![1.0, -1.0]);
        // Cleared, as a step's gradients start.
        let (mut gw, mut gb) = (vec![0.0; 2], vec![0.0]);
        let mut grad_input = Matrix::default();
        let mut output = Matrix::default();
        layer.forward(&StepContext::rows(input.rows()), &input, &mut output, &mut ());
        layer.backward(
            &StepContext::rows(input.rows()),
            &input,
            &output,
            &(),
            &grad_output,
            &mut [&mut gw, &mut gb],
            false,
            Some(&mut grad_input),
        );
        assert_eq!(gw, [-2.0, -2.0]);
        assert_eq!(gb, [0.0]);
        assert_eq!(grad_input, Matrix::from_vec(2, 2, vec![3.0, -2.0, -3.0, 2.0]));
    }

    #[test]
    fn column_sums_spans_blocks() {
        // 130 columns cover two full blocks and a partial one; each sum must be the one formed
        // over the rows in order, to the bit (values of mixed magnitude make the order matter).
        let (rows, cols) = (7, 130);
        let src: Vec<f32> =
            (0..rows * cols).map(|i| ((i * 7919 % 1009) as f32 - 500.0) * 1.1f32.powi(i as i32 % 40)).collect();
        let in_order = |c: usize| (0..rows).fold(0.0f32, |sum, r| sum + src[r * cols + c]);
        let mut sums = vec![f32::NAN; cols];
        column_sums(&mut sums, &src, false);
        assert!(sums.iter().enumerate().all(|(c, &s)| s.to_bits() == in_order(c).to_bits()));
        let mut accumulated = vec![1.0; cols];
        column_sums(&mut accumulated, &src, true);
        assert!(accumulated.iter().enumerate().all(|(c, &s)| s.to_bits() == (1.0 + in_order(c)).to_bits()));
    }

    #[test]
    #[should_panic(expected = "Linear has 2 parameters (weight, bias); index 2 is out of range")]
    fn param_index_out_of_range_panics() {
        Linear::<2, 2>::init(&mut InitRng::new(0)).param(2);
    }
}
