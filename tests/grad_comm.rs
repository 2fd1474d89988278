//! `#[distributed_model(grad_comm = bf16)]`: the wire format is part of the compiled schedule (its
//! table, its fingerprint, `SCHEDULE`), and the communicator sends what the schedule says unless
//! the run chooses otherwise (`--grad-comm`): on 2 ranks a bf16 model trains to the very floats of
//! its FP32 twin with bf16 chosen at run time, and to FP32's with FP32 chosen.

use overlap::prelude::*;
use overlap::WireFormat;

mod common;

#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 0.25)]
pub struct Plain {
    fc1: Linear<32, 512>,
    act1: Tanh,
    fc2: Linear<512, 640>,
    act2: Tanh,
    head: Linear<640, 10>,
}

#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 0.25, grad_comm = bf16)]
pub struct Narrow {
    fc1: Linear<32, 512>,
    act1: Tanh,
    fc2: Linear<512, 640>,
    act2: Tanh,
    head: Linear<640, 10>,
}

/// Parameters after 10 SGD steps of model `$model` on `$comm`, each rank on its own batches.
macro_rules! train {
    ($model:ident, $workspace:ident, $comm:expr) => {{
        let comm: &Communicator = $comm;
        let (mut model, mut optimizer) = ($model::new(comm, 3).unwrap(), Sgd::new(0.05).momentum(0.9));
        let (mut grads, mut ws, mut dy) = (model.new_grads(), $workspace::default(), Matrix::default());
        for step in 0..10 {
            let x = (0..16 * 32).map(|i| ((i * 7 + comm.rank() * 13 + step * 29) % 31) as f32 / 31.0 - 0.5).collect();
            let labels: Vec<usize> = (0..16).map(|i| (i + comm.rank() + step) % 10).collect();
            let logits = model.forward(&Matrix::from_vec(16, 32, x), &mut ws);
            CrossEntropyLoss.forward_backward(logits, &labels, &mut dy);
            let in_flight = model.backward(&mut ws, &dy, grads, comm, &mut optimizer);
            grads = model.step(in_flight, &mut optimizer).unwrap();
        }
        $model::SCHEDULE.params().map(|p| model.param(p).to_vec()).collect::<Vec<Vec<f32>>>()
    }};
}

#[test]
fn the_format_is_part_of_the_schedule_its_table_and_its_fingerprint() {
    assert!(Plain::SCHEDULE.buckets.iter().all(|b| b.wire == WireFormat::Fp32));
    assert!(Narrow::SCHEDULE.buckets.iter().all(|b| b.wire == WireFormat::Bf16));
    let (plain, narrow) = (&Plain::SCHEDULE, &Narrow::SCHEDULE);
    assert_eq!(plain.buckets.len(), narrow.buckets.len(), "the format does not move boundaries");
    assert_eq!(narrow.total_wire_bytes() * 2, narrow.total_bytes());
    let table = narrow.to_string();
    assert!(table.contains("on the wire per rank instead of"), "{table}");
    assert!(table.contains("(2.0x fewer bytes)"), "{table}");
    for k in 0..narrow.buckets.len() {
        let row = table.lines().find(|l| l.starts_with(&format!("b{k} "))).unwrap();
        assert!(row.contains(&format!("bf16 {}", overlap::plan::human_bytes(narrow.wire_bytes(k)))), "{row}");
    }
    assert!(!plain.to_string().contains("on the wire"), "FP32 tables are unchanged");
    // Same layers and buckets, another format: ranks built from the two would be refused.
    let renamed = narrow.clone().with_wire(WireFormat::Fp32);
    assert_ne!(renamed.fingerprint(), narrow.fingerprint());
}

#[test]
fn one_process_sends_nothing_whatever_the_schedule_says() {
    let comm = Communicator::single();
    assert_eq!(train!(Narrow, NarrowWorkspace, &comm), train!(Plain, PlainWorkspace, &comm));
}

#[test]
fn one_rank_under_mpirun_rounds_nothing() {
    if !common::mpirun_available() {
        return;
    }
    // Shared memory is refused on one rank; `--all-reduce auto` picks MPI there.
    common::run_on_ranks("one_rank_trains_as_fp32", 1, "mpi", "overlap");
}

#[test]
#[ignore = "runs under mpirun -n 1, started by one_rank_under_mpirun_rounds_nothing"]
fn one_rank_trains_as_fp32() {
    let comm = common::test_communicator();
    assert_eq!(comm.world_size(), 1, "run under mpirun -n 1");
    let narrow = train!(Narrow, NarrowWorkspace, &comm);
    assert_eq!(narrow, train!(Plain, PlainWorkspace, &comm), "grad_comm = bf16 on one rank");
    let mut comm = comm;
    comm.set_wire_format(WireFormat::Fp16);
    assert_eq!(train!(Plain, PlainWorkspace, &comm), narrow, "--grad-comm fp16 on one rank");
}

#[test]
fn two_ranks_send_what_the_schedule_says() {
    if !common::mpirun_available() {
        return;
    }
    common::run_on_two_ranks_each_way("ranks_send_what_the_schedule_says");
}

#[test]
#[ignore = "runs under mpirun, started by two_ranks_send_what_the_schedule_says"]
fn ranks_send_what_the_schedule_says() {
    // One communicator per process (MPI starts once); each model built on it hands over its formats.
    let mut comm = common::test_communicator();
    let from_schedule = train!(Narrow, NarrowWorkspace, &comm);
    comm.set_wire_format(WireFormat::Bf16);
    let chosen_at_run_time = train!(Plain, PlainWorkspace, &comm);
    assert_eq!(from_schedule, chosen_at_run_time, "grad_comm = bf16 sends bf16");
    comm.set_wire_format(WireFormat::Fp32);
    let overridden = train!(Narrow, NarrowWorkspace, &comm);
    let fp32 = train!(Plain, PlainWorkspace, &comm);
    assert_eq!(overridden, fp32, "--grad-comm fp32 overrides the schedule");
    assert_ne!(from_schedule, fp32, "bf16 rounds something");
}

#[test]
fn ranks_choosing_other_formats_in_the_trainer_are_refused() {
    if !common::mpirun_available() {
        return;
    }
    common::run_on_two_ranks_each_way("a_trainer_whose_ranks_choose_other_formats_fails_on_every_rank");
}

/// The model was built with the schedule's formats on both ranks; the `Trainer`'s settings then
/// choose bf16 on rank 1 only, which must stop both before a gradient travels.
#[test]
#[ignore = "runs under mpirun, started by ranks_choosing_other_formats_in_the_trainer_are_refused"]
fn a_trainer_whose_ranks_choose_other_formats_fails_on_every_rank() {
    let comm = common::test_communicator();
    let mut model = Plain::new(&comm, 3).unwrap();
    let grad_comm = (comm.rank() == 1).then_some(WireFormat::Bf16);
    let settings = overlap::CommConfig { grad_comm, ..comm.config() };
    let mut data = overlap::SyntheticClassification::new(5, 32, 10);
    let trainer = Trainer::new(&comm).steps(2).batch(4).comm(settings).report(overlap::ReportFormat::Off, None);
    let error = trainer.fit(&mut model, &mut data, &CrossEntropyLoss).unwrap_err().to_string();
    assert!(error.contains("ranks disagree on the gradients' wire formats: rank(s) 1"), "{error}");
}

#[test]
fn the_gpu_refuses_a_narrow_schedule_before_it_opens_a_device() {
    let comm = Communicator::single();
    let mut model = Narrow::new(&comm, 1).unwrap();
    let mut data = overlap::SyntheticClassification::new(1, 32, 10);
    let refused = Trainer::new(&comm)
        .steps(1)
        .batch(4)
        .device(overlap::Device::Cuda { gpu: None })
        .report(overlap::ReportFormat::Off, None)
        .fit(&mut model, &mut data, &CrossEntropyLoss)
        .unwrap_err()
        .to_string();
    assert!(refused.contains("Narrow: grad_comm = bf16 is not supported on the GPU yet"), "{refused}");
}
