//! Losses: value and gradient with respect to the model output in one pass.
//!
//! Both reduce by the mean, as PyTorch's default `reduction='mean'`, so the gradient already
//! carries the `1/n` factor and the optimizer's `grad_scale` only handles ranks and micro-steps.

use crate::data::Batch;
use crate::error::{Error, Result};
use crate::tensor::Matrix;

/// What the `Trainer` minimises: a batch's mean loss and its gradient with respect to the model
/// output. `CrossEntropyLoss` and `MseLoss` are built in; implement it for a loss of your own.
/// Reduce by the mean over the rank's batch, as PyTorch does: the `Trainer` then averages over
/// ranks and micro-steps.
pub trait Loss {
    /// Returns the batch's mean loss and writes d(loss)/d(output) into `grad_output` (resized
    /// to `output`'s shape). The targets are what the dataset put in `batch` (`labels` or
    /// `targets`); a batch that does not fit is an error, not a panic.
    fn loss_and_gradient(&self, output: &Matrix, batch: &Batch, grad_output: &mut Matrix) -> Result<f32>;

    /// The loss the GPU computes in a kernel of its own, if any; without one, training on the
    /// GPU refuses this loss by name.
    fn device_loss(&self) -> Option<DeviceLoss> {
        None
    }

    /// A name for messages.
    fn name(&self) -> &str {
        std::any::type_name::<Self>()
    }
}

/// Losses with a GPU kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceLoss {
    /// Softmax cross-entropy over class-index labels (`kernels/cross_entropy.cu`).
    SoftmaxCrossEntropy,
}

/// A mean over no rows is NaN (PyTorch returns it): an error here, naming the loss.
fn refuse_no_rows(loss: &str, output: &Matrix) -> Result<()> {
    if output.rows() == 0 {
        return Err(Error::Loss(format!(
            "{loss}: the output has no rows, and the mean loss of none is not a number (an empty batch?)"
        )));
    }
    Ok(())
}

/// Cross-entropy's labels against the output they index, on either device: one per row, each
/// one of the `classes` (the GPU's kernel reads the logit a label names, unchecked).
pub(crate) fn check_class_labels(labels: &[usize], rows: usize, classes: usize) -> Result<()> {
    if labels.len() != rows {
        // `Dataset::fill` is given the last batch's labels: too many, and it added to them.
        let why = if labels.len() > rows { "clear `labels` before it pushes" } else { "fill `labels`" };
        return Err(Error::Loss(format!(
            "CrossEntropyLoss: the batch has {} labels for {rows} rows of output (does the dataset {why}?)",
            labels.len()
        )));
    }
    if let Some((row, label)) = labels.iter().enumerate().find(|(_, &l)| l >= classes) {
        return Err(Error::Loss(format!(
            "CrossEntropyLoss: label {label} of row {row} is not one of the model's {classes} classes"
        )));
    }
    Ok(())
}

impl Loss for CrossEntropyLoss {
    fn loss_and_gradient(&self, logits: &Matrix, batch: &Batch, grad: &mut Matrix) -> Result<f32> {
        refuse_no_rows("CrossEntropyLoss", logits)?;
        check_class_labels(&batch.labels, logits.rows(), logits.cols())?;
        Ok(self.forward_backward(logits, &batch.labels, grad))
    }

    fn device_loss(&self) -> Option<DeviceLoss> {
        Some(DeviceLoss::SoftmaxCrossEntropy)
    }

    fn name(&self) -> &str {
        "CrossEntropyLoss"
    }
}

impl Loss for MseLoss {
    fn loss_and_gradient(&self, output: &Matrix, batch: &Batch, grad: &mut Matrix) -> Result<f32> {
        refuse_no_rows("MseLoss", output)?;
        let target = &batch.targets;
        if (target.rows(), target.cols()) != (output.rows(), output.cols()) {
            return Err(Error::Loss(format!(
                "MseLoss: the output is {}x{} but the batch's targets are {}x{} (does the dataset fill `targets`?)",
                output.rows(),
                output.cols(),
                target.rows(),
                target.cols()
            )));
        }
        Ok(self.forward_backward(output, target, grad))
    }

    fn name(&self) -> &str {
        "MseLoss"
    }
}

/// Softmax cross-entropy over the columns of each row, averaged over rows (PyTorch's
/// `nn.CrossEntropyLoss` on raw logits with class-index targets).
#[derive(Clone, Copy, Debug, Default)]
pub struct CrossEntropyLoss;

impl CrossEntropyLoss {
    /// Returns the mean loss and writes `(softmax(logits) - onehot(labels)) / rows` into `grad`
    /// (resized to the logits' shape). Panics if `labels.len() != logits.rows()` or a label is
    /// not a column index: the data pipeline validates labels, so either is a caller bug.
    pub fn forward_backward(&self, logits: &Matrix, labels: &[usize], grad: &mut Matrix) -> f32 {
        let (rows, cols) = (logits.rows(), logits.cols());
        assert_eq!(labels.len(), rows, "CrossEntropyLoss: {} labels for {rows} rows of logits", labels.len());
        grad.resize(rows, cols);
        let inv_rows = 1.0 / rows as f32;
        let mut total = 0.0f64;
        for (r, &label) in labels.iter().enumerate() {
            assert!(label < cols, "CrossEntropyLoss: label {label} in row {r} is not below the {cols} classes");
            let z = logits.row(r);
            // Shifting by the row maximum keeps exp() from overflowing (log-sum-exp trick).
            let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let g = grad.row_mut(r);
            let mut sum = 0.0f32;
            for (g, &z) in g.iter_mut().zip(z) {
                *g = (z - max).exp();
                sum += *g;
            }
            total += f64::from(max + sum.ln() - z[label]);
            let scale = inv_rows / sum;
            for g in g.iter_mut() {
                *g *= scale;
            }
            g[label] -= inv_rows;
        }
        (total / rows as f64) as f32
    }
}

/// Squared error averaged over all elements (PyTorch's `nn.MSELoss`).
#[derive(Clone, Copy, Debug, Default)]
pub struct MseLoss;

impl MseLoss {
    /// Returns `mean((output - target)²)` and writes `2·(output - target) / numel` into `grad`
    /// (resized to the output's shape). Panics if the shapes differ (a caller bug).
    pub fn forward_backward(&self, output: &Matrix, target: &Matrix, grad: &mut Matrix) -> f32 {
        assert!(
            output.rows() == target.rows() && output.cols() == target.cols(),
            "MseLoss: output is {}x{} but target is {}x{}",
            output.rows(),
            output.cols(),
            target.rows(),
            target.cols()
        );
        grad.resize(output.rows(), output.cols());
        let numel = output.as_slice().len();
        let scale = 2.0 / numel as f32;
        let mut total = 0.0f64;
        let pairs = output.as_slice().iter().zip(target.as_slice());
        for (g, (&o, &t)) in grad.as_mut_slice().iter_mut().zip(pairs) {
            let diff = o - t;
            total += f64::from(diff * diff);
            *g = scale * diff;
        }
        (total / numel as f64) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::InitRng;

    fn assert_close(got: f32, want: f32) {
        assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "{got} vs {want}");
    }

    #[test]
    fn cross_entropy_hand_computed() {
        let logits = Matrix::from_vec(1, 3, vec![1.0, 2.0, 3.0]);
        let mut grad = Matrix::default();
        let loss = CrossEntropyLoss.forward_backward(&logits, &[2], &mut grad);
        assert_close(loss, 0.407_605_96);
        let sum: f32 = [1.0f32, 2.0, 3.0].iter().map(|z| z.exp()).sum();
        let softmax: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|z| z.exp() / sum).collect();
        for (g, want) in grad.as_slice().iter().zip([softmax[0], softmax[1], softmax[2] - 1.0]) {
            assert_close(*g, want);
        }
    }

    #[test]
    fn an_output_of_no_rows_is_an_error_not_nan() {
        let (mut empty, mut grad) = (Matrix::default(), Matrix::default());
        empty.resize(0, 3);
        let losses: [&dyn Loss; 2] = [&CrossEntropyLoss, &MseLoss];
        for loss in losses {
            let refused = loss.loss_and_gradient(&empty, &Batch::default(), &mut grad).unwrap_err().to_string();
            assert!(refused.contains("the output has no rows"), "{refused}");
            assert!(refused.contains(loss.name()), "{refused}");
        }
    }

    #[test]
    fn cross_entropy_is_stable_for_huge_logits() {
        let logits = Matrix::from_vec(2, 2, vec![1000.0, 0.0, -1000.0, 1000.0]);
        let mut grad = Matrix::default();
        // Both rows confidently right: loss 0. Both wrong: losses 1000 and 2000, mean 1500.
        assert_eq!(CrossEntropyLoss.forward_backward(&logits, &[0, 1], &mut grad), 0.0);
        assert_eq!(CrossEntropyLoss.forward_backward(&logits, &[1, 0], &mut grad), 1500.0);
        assert!(grad.as_slice().iter().all(|g| g.is_finite()));
    }

    #[test]
    fn cross_entropy_matches_finite_differences() {
        let mut rng = InitRng::new(3);
        let mut logits = Matrix::from_vec(3, 4, rng.uniform(12, 3.0));
        let labels = [0, 3, 1];
        let mut grad = Matrix::default();
        CrossEntropyLoss.forward_backward(&logits, &labels, &mut grad);
        let mut scratch = Matrix::default();
        for k in 0..12 {
            let original = logits.as_slice()[k];
            logits.as_mut_slice()[k] = original + 1e-2;
            let plus = CrossEntropyLoss.forward_backward(&logits, &labels, &mut scratch);
            logits.as_mut_slice()[k] = original - 1e-2;
            let minus = CrossEntropyLoss.forward_backward(&logits, &labels, &mut scratch);
            logits.as_mut_slice()[k] = original;
            let numeric = (plus - minus) / 2e-2;
            assert!((grad.as_slice()[k] - numeric).abs() < 1e-3, "logit {k}: {} vs {numeric}", grad.as_slice()[k]);
        }
    }

    #[test]
    #[should_panic(expected = "CrossEntropyLoss: label 3 in row 0 is not below the 3 classes")]
    fn cross_entropy_rejects_out_of_range_label() {
        CrossEntropyLoss.forward_backward(&Matrix::zeros(1, 3), &[3], &mut Matrix::default());
    }

    #[test]
    #[should_panic(expected = "CrossEntropyLoss: 1 labels for 2 rows of logits")]
    fn cross_entropy_rejects_label_count() {
        CrossEntropyLoss.forward_backward(&Matrix::zeros(2, 3), &[0], &mut Matrix::default());
    }

    #[test]
    fn mse_hand_computed() {
        let output = Matrix::from_vec(2, 2, vec![1.0, 2.0, 3.0, 4.0]);
        let target = Matrix::from_vec(2, 2, vec![0.0, 2.0, 5.0, 3.0]);
        let mut grad = Matrix::default();
        // Differences [1, 0, -2, 1]: mean of squares 6/4; gradient 2·diff/4.
        assert_eq!(MseLoss.forward_backward(&output, &target, &mut grad), 1.5);
        assert_eq!(grad, Matrix::from_vec(2, 2, vec![0.5, 0.0, -1.0, 0.5]));
    }

    #[test]
    fn mse_matches_finite_differences() {
        let mut rng = InitRng::new(4);
        let mut output = Matrix::from_vec(3, 2, rng.uniform(6, 2.0));
        let target = Matrix::from_vec(3, 2, rng.uniform(6, 2.0));
        let (mut grad, mut scratch) = (Matrix::default(), Matrix::default());
        MseLoss.forward_backward(&output, &target, &mut grad);
        for k in 0..6 {
            let original = output.as_slice()[k];
            output.as_mut_slice()[k] = original + 1e-2;
            let plus = MseLoss.forward_backward(&output, &target, &mut scratch);
            output.as_mut_slice()[k] = original - 1e-2;
            let minus = MseLoss.forward_backward(&output, &target, &mut scratch);
            output.as_mut_slice()[k] = original;
            let numeric = (plus - minus) / 2e-2;
            assert!((grad.as_slice()[k] - numeric).abs() < 1e-3, "element {k}: {} vs {numeric}", grad.as_slice()[k]);
        }
    }

    #[test]
    #[should_panic(expected = "MseLoss: output is 1x2 but target is 2x1")]
    fn mse_rejects_shape_mismatch() {
        MseLoss.forward_backward(&Matrix::zeros(1, 2), &Matrix::zeros(2, 1), &mut Matrix::default());
    }
}
