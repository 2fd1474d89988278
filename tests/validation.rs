//! The held-out loss every N steps (`Trainer::validate`, `--eval-every`): the value is the mean
//! loss of the model at that step over the same held-out samples each time, sharded over the
//! ranks as training batches are (so 2 ranks measure what 1 does on the same global batch), and
//! bad settings are refused by name; `Trainer::evaluate` measures it alone.

mod common;

use overlap::prelude::*;
use overlap::{Batch, Dataset, ReportFormat, SyntheticClassification, TrainConfig, TrainSummary, ValidationConfig};

#[distributed_model(bucket_cap_mb = 0.0005, first_bucket_mb = 0.0005)]
pub struct Tiny {
    fc1: Linear<6, 16>,
    act: Relu,
    head: Linear<16, 3>,
}

/// The mean loss of `model` over `batches` batches of `batch` held-out samples, by hand.
fn held_out_loss(model: &Tiny, held_out: &mut SyntheticClassification, batches: usize, batch: usize) -> f64 {
    let (mut b, mut ws, mut grad) = (Batch::default(), TinyWorkspace::default(), Matrix::default());
    let mut sum = 0.0;
    for k in 0..batches {
        Dataset::fill(held_out, (k * batch) as u64, batch, &mut b).unwrap();
        let logits = model.forward(&b.inputs, &mut ws);
        sum += f64::from(CrossEntropyLoss.forward_backward(logits, &b.labels, &mut grad));
    }
    sum / batches as f64
}

fn fit(steps: u64, held_out: Option<&mut SyntheticClassification>) -> (Tiny, overlap::Result<TrainSummary>) {
    let comm = Communicator::single();
    let mut model = Tiny::new(&comm, 3).unwrap();
    let mut data = SyntheticClassification::new(5, 6, 3);
    let mut trainer = Trainer::new(&comm)
        .steps(steps)
        .batch(8)
        .optimizer(OptimizerConfig::adamw(0.02))
        .report(ReportFormat::Off, None);
    if let Some(held_out) = held_out {
        trainer = trainer.validate(held_out, 4, 3);
    }
    let summary = trainer.fit(&mut model, &mut data, &CrossEntropyLoss);
    (model, summary)
}

#[test]
fn the_held_out_loss_is_the_final_models_mean_loss_on_the_same_samples() {
    let mut held_out = SyntheticClassification::new(5, 6, 3).held_out();
    let (model, summary) = fit(10, Some(&mut held_out));
    let summary = summary.unwrap();
    let want = held_out_loss(&model, &mut held_out, 3, 8);
    assert_eq!(summary.validation_loss, Some(want), "measured after the last step, on the model it ended with");
    // Measuring changes no parameter: the same run without it ends at the same bits.
    let (unmeasured, _) = fit(10, None);
    let params = |m: &Tiny| Tiny::SCHEDULE.params().map(|p| m.param(p).to_vec()).collect::<Vec<_>>();
    assert_eq!(params(&model), params(&unmeasured));
    // The held-out samples are not the training ones, and training lowered their loss.
    let fresh = Tiny::new(&Communicator::single(), 3).unwrap();
    let before = held_out_loss(&fresh, &mut held_out, 3, 8);
    assert!(want < before, "held-out loss {before} -> {want}");
    let (mut a, mut b) = (Batch::default(), Batch::default());
    Dataset::fill(&mut held_out, 0, 8, &mut a).unwrap();
    Dataset::fill(&mut SyntheticClassification::new(5, 6, 3), 0, 8, &mut b).unwrap();
    assert_ne!(a.inputs, b.inputs);
}

/// `Trainer::evaluate`: the held-out loss alone, for a trained or loaded model, nothing changed;
/// the same number `fit` measured after its last step. Bad input is refused by name.
#[test]
fn evaluate_measures_what_validation_does_and_changes_nothing() {
    let mut held_out = SyntheticClassification::new(5, 6, 3).held_out();
    let (mut model, summary) = fit(10, Some(&mut held_out));
    let comm = Communicator::single();
    let params = |m: &Tiny| Tiny::SCHEDULE.params().map(|p| m.param(p).to_vec()).collect::<Vec<_>>();
    let before = params(&model);
    let evaluate = |model: &mut Tiny, data: &mut SyntheticClassification, batches| {
        Trainer::new(&comm).batch(8).evaluate(model, data, &CrossEntropyLoss, batches)
    };
    let measured = evaluate(&mut model, &mut held_out, 3).unwrap();
    assert_eq!(Some(measured), summary.unwrap().validation_loss);
    assert_eq!(params(&model), before, "evaluating trains nothing");
    assert_eq!(evaluate(&mut model, &mut held_out, 3).unwrap(), measured, "the same samples every time");
    // No step runs, so optimizer settings that could not train stop nothing.
    let unusable = OptimizerConfig::adamw(1e-3).clip_grad_norm(0.0).betas(1.0, 0.999);
    let trainer = Trainer::new(&comm).batch(8).optimizer(unusable);
    assert_eq!(trainer.evaluate(&mut model, &mut held_out, &CrossEntropyLoss, 3).unwrap(), measured);
    let e = evaluate(&mut model, &mut held_out, 0).unwrap_err().to_string();
    assert!(e.contains("`Trainer::evaluate` on 0 batch(es) of 8 sample(s)"), "{e}");
    let e = evaluate(&mut model, &mut SyntheticClassification::new(5, 7, 3), 2).unwrap_err().to_string();
    assert!(e.contains("gives 7 features per sample, Tiny's first layer takes 6"), "{e}");
}

#[test]
fn evaluate_on_two_ranks_measures_the_global_batch() {
    if common::mpirun_available() {
        common::run_on_ranks("ranks_evaluate", 2, "shared-memory", "overlap");
    }
}

/// The body of `evaluate_on_two_ranks_measures_the_global_batch`, on each rank: 4 samples per
/// rank measure what one process measures on the 8 of each global batch.
#[test]
#[ignore = "runs under mpirun, started by evaluate_on_two_ranks_measures_the_global_batch"]
fn ranks_evaluate() {
    let comm = common::two_rank_communicator();
    let mut model = Tiny::new(&comm, 3).unwrap();
    let mut held_out = SyntheticClassification::new(5, 6, 3).held_out();
    let measured = Trainer::new(&comm).batch(4).evaluate(&mut model, &mut held_out, &CrossEntropyLoss, 3).unwrap();
    let want = held_out_loss(&model, &mut held_out, 3, 8);
    assert!((measured - want).abs() <= 1e-6 * want, "2 ranks {measured}, by hand {want}");
}

#[test]
fn bad_validation_settings_are_refused_by_name() {
    let comm = Communicator::single();
    let mut model = Tiny::new(&comm, 3).unwrap();
    let mut data = SyntheticClassification::new(5, 6, 3);
    let config = TrainConfig { validation: Some(ValidationConfig { every: 5, batches: 2 }), ..TrainConfig::default() };
    let e = Trainer::new(&comm).config(config).fit(&mut model, &mut data, &CrossEntropyLoss).unwrap_err();
    assert!(e.to_string().contains("no held-out data was given (`Trainer::validate`)"), "{e}");
    let mut held_out = data.held_out();
    let e =
        Trainer::new(&comm).validate(&mut held_out, 0, 2).fit(&mut model, &mut data, &CrossEntropyLoss).unwrap_err();
    assert!(e.to_string().contains("`TrainConfig::validation` every 0 steps on 2 batches"), "{e}");
    let mut other_width = SyntheticClassification::new(5, 7, 3);
    let e =
        Trainer::new(&comm).validate(&mut other_width, 5, 2).fit(&mut model, &mut data, &CrossEntropyLoss).unwrap_err();
    assert!(e.to_string().contains("has 7 feature(s) and 1 position(s) per sample, the training data"), "{e}");
}

/// The `gpt` example on 1 and 2 ranks (the same global batch): the held-out loss is logged after
/// steps 2 and 4 (the last) and is the same on both.
#[test]
fn two_ranks_measure_what_one_does() {
    if !common::mpirun_available() {
        return;
    }
    let text = common::scratch("validation");
    let file = text.path().join("text.txt");
    std::fs::write(&file, "the quick brown fox jumps over the lazy dog. ".repeat(40)).unwrap();
    let exe = common::example("gpt");
    let run = |ranks: usize, batch: &str| {
        let n = ranks.to_string();
        let log = common::mpirun_ok(&[
            "-n",
            &n,
            exe.to_str().unwrap(),
            "--text",
            file.to_str().unwrap(),
            "--steps",
            "4",
            "--batch",
            batch,
            "--context",
            "16",
            "--eval-every",
            "2",
            "--eval-batches",
            "2",
            "--report",
            "off",
        ]);
        let values: Vec<(String, f64)> = log
            .lines()
            .filter_map(|l| l.split_once("validation loss "))
            .map(|(step, v)| (step.trim().to_string(), v.trim().parse().unwrap()))
            .collect();
        (log, values)
    };
    let (log1, one) = run(1, "4");
    let (log2, two) = run(2, "2");
    let steps: Vec<&str> = one.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(steps, ["step      2", "step      4"], "{log1}");
    let steps2: Vec<&str> = two.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(steps2, steps, "2 ranks measure at the same steps: {log2}");
    for ((_, a), (_, b)) in one.iter().zip(&two) {
        assert!((a - b).abs() < 2e-4, "1 rank {one:?}, 2 ranks {two:?}");
    }
    assert!(log1.contains("(validation "), "the closing line gives the last value: {log1}");
}
