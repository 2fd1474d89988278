//! A learning-rate schedule through the `Trainer` (`OptimizerConfig::lr_schedule`): each step
//! runs at the schedule's rate for that step, including the updates lent to the all-reduces, and
//! a resumed run continues the schedule where it stopped.

use overlap::prelude::*;
use overlap::{Batch, LrSchedule, ReportFormat, SyntheticClassification};

#[distributed_model(bucket_cap_mb = 0.0005, first_bucket_mb = 0.0005)]
pub struct Tiny {
    fc1: Linear<6, 16>,
    act: Relu,
    head: Linear<16, 3>,
}

const SCHEDULE: LrSchedule = LrSchedule::WarmupCosine { warmup: 3, decay_until: 8, min_lr: 1e-3 };

fn params(model: &Tiny) -> Vec<Vec<f32>> {
    Tiny::SCHEDULE.params().map(|p| model.param(p).to_vec()).collect()
}

fn trained(steps: u64, resume: Option<&std::path::Path>, save: Option<&std::path::Path>) -> Vec<Vec<f32>> {
    let comm = Communicator::single();
    let mut model = Tiny::new(&comm, 4).unwrap();
    let mut data = SyntheticClassification::new(11, 6, 3);
    let mut trainer = Trainer::new(&comm)
        .steps(steps)
        .batch(8)
        .optimizer(OptimizerConfig::adamw(0.05).lr_schedule(SCHEDULE))
        .report(ReportFormat::Off, None);
    if let Some(dir) = save {
        trainer = trainer.save(dir, None);
    }
    if let Some(dir) = resume {
        trainer = trainer.resume(dir);
    }
    trainer.fit(&mut model, &mut data, &CrossEntropyLoss).unwrap();
    params(&model)
}

/// The same steps written by hand: the rate of each step set before its backward.
fn by_hand(steps: u64) -> Vec<Vec<f32>> {
    let comm = Communicator::single();
    let mut model = Tiny::new(&comm, 4).unwrap();
    let mut data = SyntheticClassification::new(11, 6, 3);
    let mut optimizer = AdamW::new(0.05);
    let (mut grads, mut ws) = (model.new_grads(), TinyWorkspace::default());
    let (mut batch, mut dlogits) = (Batch::default(), Matrix::default());
    for step in 0..steps {
        optimizer.set_lr(SCHEDULE.lr(0.05, step));
        overlap::Dataset::fill(&mut data, step * 8, 8, &mut batch).unwrap();
        let logits = model.forward(&batch.inputs, &mut ws);
        CrossEntropyLoss.forward_backward(logits, &batch.labels, &mut dlogits);
        let in_flight = model.backward(&mut ws, &dlogits, grads, &comm, &mut optimizer);
        grads = model.step(in_flight, &mut optimizer).unwrap();
    }
    params(&model)
}

#[test]
fn each_step_runs_at_its_scheduled_rate() {
    assert_eq!(trained(10, None, None), by_hand(10), "warm-up, decay and the minimum, step by step");
    assert_ne!(trained(10, None, None), {
        let comm = Communicator::single();
        let mut model = Tiny::new(&comm, 4).unwrap();
        let mut data = SyntheticClassification::new(11, 6, 3);
        Trainer::new(&comm)
            .steps(10)
            .batch(8)
            .optimizer(OptimizerConfig::adamw(0.05))
            .report(ReportFormat::Off, None)
            .fit(&mut model, &mut data, &CrossEntropyLoss)
            .unwrap();
        params(&model)
    });
}

#[test]
fn a_resumed_run_continues_the_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    trained(4, None, Some(&ck));
    assert_eq!(trained(10, Some(&ck), None), trained(10, None, None));
}

#[test]
fn a_schedule_that_cannot_be_followed_is_refused_before_step_1() {
    let refusal = |optimizer: OptimizerConfig| {
        let comm = Communicator::single();
        let mut model = Tiny::new(&comm, 4).unwrap();
        Trainer::new(&comm)
            .steps(3)
            .optimizer(optimizer)
            .report(ReportFormat::Off, None)
            .fit(&mut model, &mut SyntheticClassification::new(1, 6, 3), &CrossEntropyLoss)
            .unwrap_err()
            .to_string()
    };
    let bad = LrSchedule::WarmupCosine { warmup: 5, decay_until: 5, min_lr: 0.0 };
    let err = refusal(OptimizerConfig::sgd(0.1).lr_schedule(bad));
    assert!(err.contains("`OptimizerConfig::lr_schedule` cosine:warmup=5,until=5,min=0e0"), "{err}");
    assert!(err.contains("the decay must end after the warm-up"), "{err}");
    // A minimum above the rate (nanoGPT's 1e-4 kept after lowering the rate to 1e-5) would make
    // the "decay" raise the rate tenfold.
    let rising = LrSchedule::WarmupCosine { warmup: 1, decay_until: 5, min_lr: 1e-4 };
    let err = refusal(OptimizerConfig::adamw(1e-5).lr_schedule(rising));
    assert!(err.contains("its minimum rate 1e-4 is above the learning rate 1e-5 (`OptimizerConfig::lr`)"), "{err}");
}
