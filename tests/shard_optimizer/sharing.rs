//! Models that share a communicator: each keeps its own sharding default, and another model's
//! forward cannot take the place of a sharded model's own, whose parameters are still in flight.

use super::*;

/// Two models on one communicator, one marked `shard_optimizer` and one not, each keep their own
/// default, whichever was built last: after a step the sharded one's parameters travel in its
/// all-gathers, the other's are back at once. A run's choice holds for both.
#[test]
#[ignore = "runs under mpirun (see each_model_on_a_communicator_keeps_its_own_sharding_default)"]
fn models_sharing_a_communicator_keep_their_own_sharding_default() {
    let comm = common::test_communicator();
    for sharded_first in [true, false] {
        for chosen in [None, Some(true), Some(false)] {
            comm.apply(&CommConfig { mode: comm.mode(), shard_optimizer: chosen, ..CommConfig::default() }).unwrap();
            let (mut sharded, mut whole) = if sharded_first {
                let sharded = SmallSharded::new(&comm, 11).unwrap();
                (sharded, Small::new(&comm, 11).unwrap())
            } else {
                let whole = Small::new(&comm, 11).unwrap();
                (SmallSharded::new(&comm, 11).unwrap(), whole)
            };
            let what = format!("sharded model built first: {sharded_first}, the run's choice: {chosen:?}");
            assert_eq!(gathers_after_a_step(&mut sharded, &comm), chosen.unwrap_or(true), "SmallSharded, {what}");
            assert_eq!(gathers_after_a_step(&mut whole, &comm), chosen.unwrap_or(false), "Small, {what}");
            assert_eq!(gathers_after_a_step(&mut sharded, &comm), chosen.unwrap_or(true), "SmallSharded again, {what}");
        }
    }
}

/// Another model's forward between a sharded model's step and its next forward is an error,
/// and the sharded model's parameters wait for their own forward, as they would have come.
#[test]
#[ignore = "runs under mpirun (see each_model_on_a_communicator_keeps_its_own_sharding_default)"]
fn another_models_forward_before_a_sharded_models_gathers_is_an_error() {
    let comm = common::test_communicator();
    comm.apply(&CommConfig { mode: comm.mode(), ..CommConfig::default() }).unwrap();
    let (mut sharded, mut whole) = (SmallSharded::new(&comm, 11).unwrap(), Small::new(&comm, 11).unwrap());
    let mut reference = SmallSharded::new(&comm, 11).unwrap();
    assert!(gathers_after_a_step(&mut reference, &comm));
    let params =
        |model: &SmallSharded| SmallSharded::SCHEDULE.params().map(|p| model.param(p).to_vec()).collect::<Vec<_>>();

    step(&mut sharded, &comm);
    let mut ws = <Small as DistributedModel>::Workspace::default();
    let e = whole.forward_gathering(&StepContext::rows(6), &batch(&comm).0, &mut ws, &comm).expect_err("an error");
    let said =
        "carries another model's parameters: with sharded optimizer state, a model's parameters come back at its \
                next `forward_gathering`";
    assert!(e.to_string().contains(said), "{e}");
    comm.finish_gathers(&mut sharded).unwrap();
    assert_eq!(params(&sharded), params(&reference), "the sharded model's parameters, after the other's forward");
}

/// A batch of 6 rows of `Small`'s 7 features, and its labels, different on each rank.
fn batch(comm: &Communicator) -> (Matrix, Vec<usize>) {
    let x = Matrix::from_vec(6, 7, (0..42).map(|i| ((i * 3 + comm.rank()) % 11) as f32 / 11.0 - 0.5).collect());
    (x, (0..6).map(|i| (i + comm.rank()) % 5).collect())
}

/// One step of `model` driven by hand (SGD), its all-gathers left in flight.
fn step<M: DistributedModel>(model: &mut M, comm: &Communicator) {
    let mut optimizer = OptimizerConfig::default().build(&M::SCHEDULE);
    let (x, labels) = batch(comm);
    let (mut ws, mut dy) = (M::Workspace::default(), Matrix::default());
    let logits = model.forward_gathering(&StepContext::rows(6), &x, &mut ws, comm).unwrap();
    CrossEntropyLoss.forward_backward(logits, &labels, &mut dy);
    let in_flight = model.backward(&mut ws, &dy, model.new_grads(), comm, &mut optimizer);
    model.step(in_flight, &mut optimizer).unwrap();
}

/// Whether a step of `model` left its parameters with the all-gathers it launched for the next
/// forward (sharded optimizer state) rather than in the model; they are back in it after.
fn gathers_after_a_step<M: DistributedModel>(model: &mut M, comm: &Communicator) -> bool {
    step(model, comm);
    let gathering = M::SCHEDULE.params().any(|p| model.param(p).is_empty());
    comm.finish_gathers(model).unwrap();
    assert!(M::SCHEDULE.params().all(|p| !model.param(p).is_empty()), "{}: parameters missing", M::SCHEDULE.model);
    gathering
}

#[test]
fn each_model_on_a_communicator_keeps_its_own_sharding_default() {
    if !common::mpirun_available() {
        return;
    }
    for (transport, mode) in [("shared-memory", "overlap"), ("mpi", "overlap"), ("shared-memory", "no-overlap")] {
        common::run_on_ranks(
            "sharing::models_sharing_a_communicator_keep_their_own_sharding_default",
            2,
            transport,
            mode,
        );
        common::run_on_ranks(
            "sharing::another_models_forward_before_a_sharded_models_gathers_is_an_error",
            2,
            transport,
            mode,
        );
    }
}
