//! What a library user can get wrong through the `Trainer`, their own dataset and loss, or the
//! settings' numbers, is an error naming it before or at the step it happens: never a panic
//! deep inside a layer, nor a run that trains to NaN.

use overlap::prelude::*;
use overlap::{Batch, Dataset, Loss, Matrix, ReportFormat, SyntheticClassification};

#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct Small {
    fc1: Linear<4, 8>,
    act: Relu,
    head: Linear<8, 3>,
}

fn fit(
    configure: impl FnOnce(Trainer) -> Trainer,
    data: &mut impl Dataset,
    loss: &impl Loss,
) -> overlap::Result<TrainSummary> {
    let comm = Communicator::single();
    let mut model = Small::new(&comm, 1).unwrap();
    let trainer = Trainer::new(&comm).steps(2).batch(4).report(ReportFormat::Off, None);
    configure(trainer).fit(&mut model, data, loss)
}

/// Says its samples have `says` features and fills `fills` columns, describing itself no further;
/// holds `holds` samples, or samples without end.
struct Columns {
    fills: usize,
    says: usize,
    holds: Option<u64>,
}

impl Dataset for Columns {
    fn fill(&mut self, _first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        batch.inputs.resize(rows, self.fills);
        batch.labels = vec![0; rows];
        Ok(())
    }

    fn features(&self) -> usize {
        self.says
    }

    fn len(&self) -> Option<u64> {
        self.holds
    }
}

/// Cross-entropy whose gradient has a row too many.
struct OffByOne;

impl Loss for OffByOne {
    fn loss_and_gradient(&self, output: &Matrix, batch: &Batch, grad: &mut Matrix) -> overlap::Result<f32> {
        let value = CrossEntropyLoss.loss_and_gradient(output, batch, grad)?;
        grad.resize(output.rows() + 1, output.cols());
        Ok(value)
    }
}

/// Synthetic samples with a NaN feature in the first row of the second step.
struct NanFeatureLater(SyntheticClassification);

impl Dataset for NanFeatureLater {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        self.0.fill(first, rows, batch)?;
        if first == rows as u64 {
            batch.inputs.as_mut_slice()[1] = f32::NAN;
        }
        Ok(())
    }

    fn features(&self) -> usize {
        self.0.features()
    }
}

/// Cross-entropy that turns NaN from the second call on, as a loss with a division by zero does.
struct NanLater(std::cell::Cell<u32>);

impl Loss for NanLater {
    fn loss_and_gradient(&self, output: &Matrix, batch: &Batch, grad: &mut Matrix) -> overlap::Result<f32> {
        let value = CrossEntropyLoss.loss_and_gradient(output, batch, grad)?;
        self.0.set(self.0.get() + 1);
        Ok(if self.0.get() > 1 { f32::NAN } else { value })
    }
}

#[test]
fn zero_threads_are_refused_by_name() {
    // (Two threads train as one to rounding: `tests/mpi.rs`, through `--threads`. Not here: the
    // setting is the process's, and this binary's tests run side by side.)
    let mut data = SyntheticClassification::new(3, 4, 3);
    let err = fit(|t| t.threads(0), &mut data, &CrossEntropyLoss).unwrap_err().to_string();
    assert!(err.contains("`TrainConfig::threads` must be at least 1"), "{err}");
}

#[test]
fn a_nan_in_the_data_stops_the_run_at_its_step() {
    // Through the ReLU too, which keeps NaN as PyTorch does: `max(x, 0)` turned it into 0, and
    // the run finished with NaN in `fc1.weight` and a finite loss.
    let mut data = NanFeatureLater(SyntheticClassification::new(3, 4, 3));
    let err = fit(|t| t, &mut data, &CrossEntropyLoss).unwrap_err().to_string();
    assert!(err.contains("the loss is NaN at step 2 on rank 0"), "{err}");
}

#[test]
fn a_non_finite_loss_stops_the_run_at_its_step() {
    let mut data = SyntheticClassification::new(3, 4, 3);
    let err = fit(|t| t, &mut data, &NanLater(Default::default())).unwrap_err().to_string();
    assert!(err.contains("the loss is NaN at step 2 on rank 0"), "{err}");
    assert!(err.contains("or `OptimizerConfig::clip_grad_norm`"), "{err}");
    // Clipping is no advice where it is on.
    let clipped = OptimizerConfig::sgd(0.05).clip_grad_norm(1.0);
    let err = fit(|t| t.optimizer(clipped), &mut data, &NanLater(Default::default())).unwrap_err().to_string();
    assert!(err.contains("the loss is NaN at step 2") && err.contains("gradients are clipped to norm 1)"), "{err}");
    // A finite loss whose gradient is not: stopped at its step too, before any parameter is NaN.
    let err = fit(|t| t, &mut data, &NanGradientLater(Default::default())).unwrap_err().to_string();
    assert!(err.contains("the loss's gradient is NaN at row 0, column 0") && err.contains("at step 2"), "{err}");
}

/// Cross-entropy whose gradient holds a NaN from the second call on, its value finite.
struct NanGradientLater(std::cell::Cell<u32>);

impl Loss for NanGradientLater {
    fn loss_and_gradient(&self, output: &Matrix, batch: &Batch, grad: &mut Matrix) -> overlap::Result<f32> {
        let value = CrossEntropyLoss.loss_and_gradient(output, batch, grad)?;
        self.0.set(self.0.get() + 1);
        if self.0.get() > 1 {
            grad.as_mut_slice()[0] = f32::NAN;
        }
        Ok(value)
    }
}

/// The synthetic samples with their first feature always 0: `fc1.weight`'s first column then
/// has gradients of exactly 0.
struct FirstFeatureZero(SyntheticClassification);

impl Dataset for FirstFeatureZero {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        self.0.fill(first, rows, batch)?;
        (0..rows).for_each(|r| batch.inputs.row_mut(r)[0] = 0.0);
        Ok(())
    }

    fn features(&self) -> usize {
        self.0.features()
    }
}

#[test]
fn adamw_with_eps_0_is_named_when_its_zero_gradients_turn_the_loss_nan() {
    // PyTorch's AdamW takes eps 0 and divides 0 by 0 there too; the NaN names the cause.
    let mut data = FirstFeatureZero(SyntheticClassification::new(3, 4, 3));
    let adamw = OptimizerConfig::adamw(1e-3).eps(0.0);
    let err = fit(|t| t.optimizer(adamw), &mut data, &CrossEntropyLoss).unwrap_err().to_string();
    assert!(err.contains("the loss is NaN at step 2") && err.contains("with `OptimizerConfig::eps` 0"), "{err}");
    let mut data = FirstFeatureZero(SyntheticClassification::new(3, 4, 3));
    fit(|t| t.optimizer(OptimizerConfig::adamw(1e-3)), &mut data, &CrossEntropyLoss).unwrap();
}

#[test]
fn a_dataset_or_loss_of_the_wrong_shape_is_an_error_not_a_panic() {
    let err = fit(|t| t, &mut Columns { fills: 5, says: 4, holds: None }, &CrossEntropyLoss).unwrap_err().to_string();
    assert!(err.contains("the dataset filled rows of 5 columns from index 0, and says its samples have 4"), "{err}");
    let err = fit(|t| t, &mut SyntheticClassification::new(3, 4, 3), &OffByOne).unwrap_err().to_string();
    assert!(err.contains("the loss's gradient is 5x3, the model's output 4x3"), "{err}");
}

#[test]
fn data_of_another_width_than_the_first_layer_is_refused_naming_both() {
    let err = fit(|t| t, &mut Columns { fills: 6, says: 6, holds: None }, &CrossEntropyLoss).unwrap_err().to_string();
    assert!(err.contains("the data gives 6 features per sample, Small's first layer takes 4"), "{err}");
    // A dataset that describes itself is named by its description.
    let err = fit(|t| t, &mut SyntheticClassification::new(3, 6, 3), &CrossEntropyLoss).unwrap_err().to_string();
    assert!(err.contains("the data (synthetic"), "{err}");
    assert!(err.contains(") gives 6 features per sample, Small's first layer takes 4"), "{err}");
}

/// A set of more classes than the model outputs is refused before step 1, not at the first
/// batch that holds a larger label; a set of fewer trains (some outputs never the answer).
#[test]
fn data_of_more_classes_than_the_model_outputs_is_refused_before_step_1() {
    /// The set, counting its fills.
    struct Counted(SyntheticClassification, usize);
    impl Dataset for Counted {
        fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
            self.1 += 1;
            self.0.fill(first, rows, batch)
        }
        fn features(&self) -> usize {
            self.0.features()
        }
        fn classes(&self) -> Option<usize> {
            Dataset::classes(&self.0)
        }
    }
    let mut ten = Counted(SyntheticClassification::new(3, 4, 10), 0);
    let err = fit(|t| t, &mut ten, &CrossEntropyLoss).unwrap_err().to_string();
    assert!(err.contains("labels samples with 10 classes, but Small outputs 3"), "{err}");
    assert_eq!(ten.1, 0, "refused before any batch is read");
    assert!(fit(|t| t, &mut SyntheticClassification::new(3, 4, 2), &CrossEntropyLoss).is_ok());
}

#[test]
fn a_finite_set_of_no_samples_is_refused_for_training_evaluation_and_validation() {
    let empty = || Columns { fills: 4, says: 4, holds: Some(0) };
    let err = fit(|t| t, &mut empty(), &CrossEntropyLoss).unwrap_err().to_string();
    assert!(err.contains("the data (4 features per sample) holds no samples"), "{err}");
    let comm = Communicator::single();
    let mut model = Small::new(&comm, 1).unwrap();
    let mut held_out = empty();
    let err = Trainer::new(&comm)
        .validate(&mut held_out, 1, 1)
        .fit(&mut model, &mut Columns { fills: 4, says: 4, holds: Some(8) }, &CrossEntropyLoss)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the held-out data (4 features per sample) holds no samples"), "{err}");
    let err = Trainer::new(&comm).evaluate(&mut model, &mut empty(), &CrossEntropyLoss, 1).unwrap_err().to_string();
    assert!(err.contains("holds no samples"), "{err}");
}

#[test]
fn optimizer_numbers_pytorch_refuses_or_nan_are_refused_by_name() {
    for (optimizer, expected) in [
        (OptimizerConfig::sgd(f64::NAN), "`OptimizerConfig::lr` NaN: must be finite and not negative"),
        (OptimizerConfig::adamw(-1.0), "`OptimizerConfig::lr` -1: must be finite and not negative"),
        (OptimizerConfig::sgd(0.1).weight_decay(f64::NAN), "`OptimizerConfig::weight_decay` NaN"),
        (OptimizerConfig::sgd(0.1).momentum(-0.5), "`OptimizerConfig::momentum` -0.5"),
        (OptimizerConfig::adamw(1e-3).betas(1.0, 0.9), "`OptimizerConfig::betas` (1, 0.9): each must be in [0, 1)"),
        (OptimizerConfig::adamw(1e-3).eps(f64::INFINITY), "`OptimizerConfig::eps` inf"),
        (OptimizerConfig::sgd(0.1).clip_grad_norm(0.0), "`OptimizerConfig::clip_grad_norm` 0"),
        // Finite as f64, not as the f32 the updates and the clip run in.
        (OptimizerConfig::sgd(1e39), "`OptimizerConfig::lr` 1e39: rounds to inf in f32"),
        (
            OptimizerConfig::sgd(0.1).clip_grad_norm(1e-50),
            "`OptimizerConfig::clip_grad_norm` 1e-50: rounds to 0 in f32",
        ),
        // A tiny negative number is refused for its sign, not for its rounding.
        (OptimizerConfig::sgd(-1e-50), "`OptimizerConfig::lr` -1e-50: must be finite and not negative"),
        (OptimizerConfig::sgd(0.1).clip_grad_norm(-1e-50), "the largest gradient norm must be positive and finite"),
    ] {
        let mut data = SyntheticClassification::new(3, 4, 3);
        let err = fit(|t| t.optimizer(optimizer), &mut data, &CrossEntropyLoss).unwrap_err().to_string();
        assert!(err.contains(expected), "{optimizer:?}: expected `{expected}` in {err}");
    }
    // What an optimizer ignores is not checked: SGD has no betas.
    let mut data = SyntheticClassification::new(3, 4, 3);
    fit(|t| t.optimizer(OptimizerConfig::sgd(0.1).betas(2.0, 2.0)), &mut data, &CrossEntropyLoss).unwrap();
}

#[test]
fn a_report_every_0_steps_is_refused() {
    let mut data = SyntheticClassification::new(3, 4, 3);
    let err = fit(|t| t.report(ReportFormat::Text, Some(0)), &mut data, &CrossEntropyLoss).unwrap_err().to_string();
    assert!(err.contains("`ObserveConfig::report_every` must be at least 1"), "{err}");
}

#[test]
fn an_overwrite_without_checkpoints_is_refused_and_config_replaces_it() {
    let mut data = SyntheticClassification::new(3, 4, 3);
    let err = fit(|t| t.overwrite_checkpoints(), &mut data, &CrossEntropyLoss).unwrap_err().to_string();
    assert!(
        err.contains("`SaveConfig::overwrite` (`Trainer::overwrite_checkpoints`) is set, but the run saves no"),
        "{err}"
    );
    // `config` replaces every setting, an earlier `overwrite_checkpoints` included.
    fn replaced(t: Trainer) -> Trainer {
        let settings = t.settings().clone();
        t.overwrite_checkpoints().config(settings)
    }
    fit(replaced, &mut data, &CrossEntropyLoss).unwrap();
}
