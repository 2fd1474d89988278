//! One door for a run's settings: `TrainConfig::comm` (a `CommConfig`) carries the communication
//! settings a run uses, the `Trainer` starts from the communicator's own, and `fit` applies the
//! value to the communicator before the first step.

use std::time::Duration;

use overlap::prelude::*;
use overlap::{CommConfig, ReportFormat, SyntheticClassification, WireFormat};

#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct Tiny {
    fc1: Linear<6, 16>,
    act: Relu,
    head: Linear<16, 3>,
}

#[test]
fn the_trainer_starts_from_the_communicators_settings() {
    let comm = Communicator::single().with_mode(CommMode::AfterBackward);
    let trainer = Trainer::new(&comm);
    assert_eq!(trainer.settings().comm, comm.config());
    assert_eq!(trainer.settings().comm.mode, CommMode::AfterBackward);
}

#[test]
fn fit_applies_the_runs_communication_settings() {
    let comm = Communicator::single();
    let settings = CommConfig {
        mode: CommMode::Skip,
        check_finite: true,
        grad_comm: Some(WireFormat::Bf16),
        wait_timeout: Some(Duration::from_secs(5)),
        ..CommConfig::default()
    };
    let mut model = Tiny::new(&comm, 1).unwrap();
    let mut data = SyntheticClassification::new(7, 6, 3);
    let summary = Trainer::new(&comm)
        .comm(settings)
        .steps(3)
        .batch(8)
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut data, &CrossEntropyLoss)
        .unwrap();
    assert_eq!(summary.steps, 3);
    assert_eq!(comm.config(), settings, "the communicator runs with the run's settings");
    assert_eq!(
        (comm.mode(), comm.checks_finite(), comm.wire_format(&Tiny::SCHEDULE, 0)),
        (CommMode::Skip, true, WireFormat::Bf16)
    );
    assert_eq!(comm.wait_timeout(), Some(Duration::from_secs(5)));
}
