//! Dropout (`Dropout`, `TrainConfig::dropout`, `--dropout`): it changes training and nothing
//! else; the held-out loss is measured without it; its masks follow the samples, so a global
//! batch split over 2 ranks and a resumed run train exactly as 1 rank and an uninterrupted run;
//! bad rates and a rate for a model without a `Dropout` layer are refused by name.

mod common;

use std::path::Path;

use common::{example, mpirun_ok, scratch};
use overlap::prelude::*;
use overlap::{Batch, Dataset, DropoutConfig, ReportFormat, SyntheticClassification, TrainConfig, TrainSummary};

#[distributed_model(bucket_cap_mb = 0.0005, first_bucket_mb = 0.0005)]
pub struct Dropped {
    fc1: Linear<6, 32>,
    act: Relu,
    drop: Dropout,
    head: Linear<32, 3>,
}

#[distributed_model]
pub struct Undropped {
    fc1: Linear<6, 3>,
}

fn fit(rate: f32, seed: u64, held_out: &mut SyntheticClassification) -> (Dropped, TrainSummary) {
    let comm = Communicator::single();
    let mut model = Dropped::new(&comm, 3).unwrap();
    let summary = Trainer::new(&comm)
        .steps(12)
        .batch(8)
        .optimizer(OptimizerConfig::adamw(0.02))
        .report(ReportFormat::Off, None)
        .dropout(rate, seed)
        .validate(held_out, 12, 3)
        .fit(&mut model, &mut SyntheticClassification::new(5, 6, 3), &CrossEntropyLoss)
        .unwrap();
    (model, summary)
}

fn params(model: &Dropped) -> Vec<Vec<f32>> {
    Dropped::SCHEDULE.params().map(|p| model.param(p).to_vec()).collect()
}

#[test]
fn dropout_changes_training_and_the_held_out_loss_is_measured_without_it() {
    let mut held_out = SyntheticClassification::new(5, 6, 3).held_out();
    let (dropped, summary) = fit(0.5, 7, &mut held_out);
    let (plain, _) = fit(0.0, 7, &mut held_out);
    assert_ne!(params(&dropped), params(&plain), "a rate of 0.5 dropped nothing");
    // The same seed draws the same masks; another seed others.
    assert_eq!(params(&fit(0.5, 7, &mut held_out).0), params(&dropped));
    assert_ne!(params(&fit(0.5, 8, &mut held_out).0), params(&dropped));
    // The held-out loss is the model's without dropout: `forward` (which never drops) on the
    // same samples gives the same value.
    let (mut batch, mut ws, mut grad) = (Batch::default(), DroppedWorkspace::default(), Matrix::default());
    let mut sum = 0.0;
    for k in 0..3 {
        Dataset::fill(&mut held_out, k * 8, 8, &mut batch).unwrap();
        let logits = dropped.forward(&batch.inputs, &mut ws);
        sum += f64::from(CrossEntropyLoss.forward_backward(logits, &batch.labels, &mut grad));
    }
    assert_eq!(summary.validation_loss, Some(sum / 3.0));
}

#[test]
fn bad_rates_and_a_model_without_dropout_are_refused_by_name() {
    let comm = Communicator::single();
    let mut data = SyntheticClassification::new(5, 6, 3);
    for rate in [1.0, -0.1, f32::NAN, 7.0] {
        let mut model = Dropped::new(&comm, 3).unwrap();
        let config = TrainConfig { dropout: DropoutConfig { rate, seed: 0 }, ..TrainConfig::default() };
        let e = Trainer::new(&comm).config(config).fit(&mut model, &mut data, &CrossEntropyLoss).unwrap_err();
        assert!(e.to_string().contains(&format!("`DropoutConfig::rate` {rate}: a dropout rate is at least 0")), "{e}");
    }
    let mut model = Undropped::new(&comm, 3).unwrap();
    let e = Trainer::new(&comm).dropout(0.2, 0).fit(&mut model, &mut data, &CrossEntropyLoss).unwrap_err();
    assert!(e.to_string().contains("`DropoutConfig::rate` 0.2: Undropped has no `Dropout` layer nor attention"), "{e}");
    // Rate 0 is no dropout, with or without the layer.
    Trainer::new(&comm)
        .steps(1)
        .report(ReportFormat::Off, None)
        .dropout(0.0, 0)
        .fit(&mut model, &mut data, &CrossEntropyLoss)
        .unwrap();
}

/// The `gpt` example for `steps` steps on `ranks` ranks, `extra` flags after its own; what it
/// printed.
fn gpt(ranks: usize, text: &Path, steps: &str, extra: &[&str]) -> String {
    let exe = example("gpt");
    let (n, exe) = (ranks.to_string(), exe.to_str().unwrap().to_string());
    let base = ["--oversubscribe", "-n", &n, &exe, "--text", text.to_str().unwrap(), "--steps", steps];
    let flags = ["--log-every", "1", "--report", "off", "--lr-schedule", "constant", "--lr", "3e-3"];
    mpirun_ok(&[&base[..], &flags, extra].concat())
}

/// The training loss logged at each step, as printed (`step 3/6  loss 3.7332 ...`).
fn losses(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with("step ") && !l.contains("validation"))
        .filter_map(|l| l.split("loss ").nth(1)?.split_whitespace().next())
        .collect()
}

#[test]
fn two_ranks_and_a_resumed_run_draw_the_masks_of_one_uninterrupted_rank() {
    let root = scratch("dropout");
    let text = root.path().join("text.txt");
    let line = "the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs.\n";
    std::fs::write(&text, line.repeat(60)).unwrap();
    let one = gpt(1, &text, "6", &["--batch", "4", "--dropout", "0.3"]);
    let two = gpt(2, &text, "6", &["--batch", "2", "--dropout", "0.3"]);
    let none = gpt(1, &text, "6", &["--batch", "4"]);
    assert_eq!(losses(&one).len(), 6, "{one}");
    assert_eq!(losses(&one), losses(&two), "one rank:\n{one}\ntwo ranks:\n{two}");
    assert_ne!(losses(&one)[1..], losses(&none)[1..], "--dropout 0.3 changed nothing:\n{one}\n{none}");
    // Stopped after 3 steps and resumed: the last 3 steps draw what the run above drew.
    let dir = root.path().join("checkpoints");
    let d = dir.to_str().unwrap();
    gpt(2, &text, "3", &["--batch", "2", "--dropout", "0.3", "--save", d]);
    let resumed = gpt(2, &text, "6", &["--batch", "2", "--dropout", "0.3", "--resume", d]);
    assert_eq!(losses(&resumed), losses(&two)[3..], "resumed:\n{resumed}\nstraight:\n{two}");
}
