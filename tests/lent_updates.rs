//! Parameters lent to their bucket's all-reduce and updated there: the same floats as updating
//! after the wait point, nothing lent when a layer or the optimizer cannot lend, and a clear
//! panic for a forward while parameters are away, a second backward before the step, a backward
//! before any forward or state given back to another optimizer; another model's buckets given to
//! `step` are an error. Either way `step` hands the gradients back
//! cleared, which layers rely on (they add into them): checked on one process and, under
//! mpirun, on two ranks with each transport. `tests/mpi.rs` compares the two update paths on
//! several ranks.

use overlap::prelude::*;
use overlap::CommMode;

mod common;

/// `Gain`, the user-defined layer of `examples/custom_layer.rs`, keeps its parameter out of reach
/// (`param_vec_mut` stays `None`), so a bucket holding it cannot lend.
#[allow(dead_code)] // the example's own model and `main` are not used here
#[path = "../examples/custom_layer.rs"]
mod custom_layer;
use custom_layer::Gain;

/// Every parameter can be lent: two buckets.
#[distributed_model(bucket_cap_mb = 0.01, first_bucket_mb = 0.01)]
pub struct Lendable {
    fc1: Linear<16, 32>,
    act: Relu,
    fc2: Linear<32, 4>,
}

/// `gain` shares its bucket with `fc2`'s parameters, which could be lent: the bucket lends none.
#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct WithGain {
    fc1: Linear<16, 32>,
    #[layer(input = 32, output = 32, params(gain = [32]))]
    gain: Gain<32>,
    fc2: Linear<32, 4>,
}

/// A gain of one's own that lends its parameter to its bucket's all-reduce (`param_vec_mut`), as
/// the built-in layers do, without checking in its own methods that it has it back.
pub struct LendingGain<const D: usize> {
    gain: Vec<f32>,
}

impl<const D: usize> Layer for LendingGain<D> {
    const PARAMS: &'static [overlap::ParamDef] = &[overlap::ParamDef { name: "gain", shape: &[D] }];
    const WIDTH: overlap::Width = overlap::Width::Preserving;
    type Saved = ();

    fn init(_: &mut overlap::InitRng) -> Self {
        LendingGain { gain: vec![1.0; D] }
    }

    fn param(&self, _: usize) -> &[f32] {
        &self.gain
    }

    fn param_mut(&mut self, _: usize) -> &mut [f32] {
        &mut self.gain
    }

    fn param_vec_mut(&mut self, _: usize) -> Option<&mut Vec<f32>> {
        Some(&mut self.gain)
    }

    fn forward(&self, _: &StepContext, x: &Matrix, y: &mut Matrix, _: &mut ()) {
        y.resize(x.rows(), D);
        for r in 0..x.rows() {
            y.row_mut(r).iter_mut().zip(x.row(r)).zip(&self.gain).for_each(|((y, x), g)| *y = x * g);
        }
    }

    fn backward(
        &self,
        _: &StepContext,
        x: &Matrix,
        _: &Matrix,
        _: &(),
        dy: &Matrix,
        grads: &mut [&mut [f32]],
        _: bool,
        dx: Option<&mut Matrix>,
    ) {
        for r in 0..x.rows() {
            grads[0].iter_mut().zip(x.row(r)).zip(dy.row(r)).for_each(|((d, x), dy)| *d += x * dy);
        }
        if let Some(dx) = dx {
            dx.resize(x.rows(), D);
            for r in 0..x.rows() {
                dx.row_mut(r).iter_mut().zip(dy.row(r)).zip(&self.gain).for_each(|((d, dy), g)| *d = dy * g);
            }
        }
    }
}

/// The lending gain first, so that a forward between `backward` and `step` meets it first.
#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct LendsItsOwn {
    #[layer(params(gain = [16]))]
    gain: LendingGain<16>,
    fc: Linear<16, 4>,
}

/// A layer of one's own whose parameters are lent is stopped by the program before its forward
/// reads nothing (the built-ins stop themselves), named by its path.
#[test]
fn a_forward_while_a_layer_of_ones_own_is_lent_is_refused_by_name() {
    let comm = Communicator::single();
    let mut optimizer = Sgd::new(0.1);
    let mut model = LendsItsOwn::new(&comm, 0).unwrap();
    let grads = model.new_grads();
    let in_flight = forward_and_backward(&mut model, grads, &comm, &mut optimizer);
    assert!(model.param(overlap::plan::ParamRef { layer: 0, param: 0 }).is_empty(), "the gain is lent");
    let message = panic_message(|| {
        model.forward(&batch().0, &mut LendsItsOwnWorkspace::default());
    });
    assert!(message.starts_with("layer `gain` ("), "{message}");
    assert!(
        message.contains("its parameters are lent to a collective that updates them: `step` takes them back"),
        "{message}"
    );
    model.step(in_flight, &mut optimizer).unwrap();
    assert!(holds_all(&model), "the gain is back");
}

/// An optimizer that lends nothing: every update runs after its wait point.
struct AfterWait<O>(O);

impl<O: Optimizer> Optimizer for AfterWait<O> {
    fn begin_step(&mut self) {
        self.0.begin_step();
    }
    fn update(&mut self, index: usize, value: &mut [f32], grad: &[f32], grad_scale: f32) {
        self.0.update(index, value, grad, grad_scale);
    }
}

fn batch() -> (Matrix, Vec<usize>) {
    let x = Matrix::from_vec(8, 16, (0..8 * 16).map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5).collect());
    (x, (0..8).map(|i| i % 4).collect())
}

/// One forward, loss and backward of `model` on `batch()`: the buckets in flight.
fn forward_and_backward<M: DistributedModel>(
    model: &mut M,
    grads: M::Grads,
    comm: &Communicator,
    optimizer: &mut impl Optimizer,
) -> M::InFlight {
    let (x, labels) = batch();
    let (mut ws, mut dy) = (M::Workspace::default(), Matrix::default());
    let logits = model.forward(&x, &mut ws);
    CrossEntropyLoss.forward_backward(logits, &labels, &mut dy);
    model.backward(&mut ws, &dy, grads, comm, optimizer)
}

/// Whether `model` holds every one of its parameters (a lent one is empty).
fn holds_all<M: DistributedModel>(model: &M) -> bool {
    M::SCHEDULE.params().all(|p| model.param(p).len() == M::SCHEDULE.param(p).numel())
}

/// Parameters of `M` after 3 steps with `optimizer` on one process.
fn train<M: DistributedModel>(optimizer: &mut impl Optimizer) -> Vec<Vec<f32>> {
    let comm = Communicator::single();
    let mut model = M::new(&comm, 3).unwrap();
    let mut grads = model.new_grads();
    for _ in 0..3 {
        let in_flight = forward_and_backward(&mut model, grads, &comm, optimizer);
        grads = model.step(in_flight, optimizer).unwrap();
    }
    M::SCHEDULE.params().map(|p| model.param(p).to_vec()).collect()
}

#[test]
fn lent_updates_give_the_floats_of_updates_after_the_wait() {
    let sgd = || Sgd::new(0.1).momentum(0.9).weight_decay(0.01);
    assert_eq!(train::<Lendable>(&mut sgd()), train::<Lendable>(&mut AfterWait(sgd())));
    assert_eq!(train::<Lendable>(&mut AdamW::new(0.01)), train::<Lendable>(&mut AfterWait(AdamW::new(0.01))));
    assert_eq!(train::<WithGain>(&mut sgd()), train::<WithGain>(&mut AfterWait(sgd())));
}

#[test]
fn backward_on_a_workspace_no_forward_filled_says_so() {
    let comm = Communicator::single();
    let mut model = Lendable::new(&comm, 0).unwrap();
    let dy = Matrix::from_vec(8, 4, vec![0.1; 32]);
    let backward = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (mut optimizer, grads) = (Sgd::new(0.1), model.new_grads());
        let _ = model.backward(&mut LendableWorkspace::default(), &dy, grads, &comm, &mut optimizer);
    }));
    let message = backward.expect_err("backward before forward");
    let message = message.downcast_ref::<String>().map(String::as_str).unwrap_or_default();
    assert!(
        message.contains(
            "layer `fc2` (overlap_runtime::layer::linear::Linear<32, 4>, layer 2): backward got a 8x4 gradient"
        ),
        "{message}"
    );
    assert!(
        message.contains("for a 0x0 output: no forward has run on this workspace (call `forward` first)"),
        "{message}"
    );
}

#[test]
fn parameters_are_away_between_backward_and_step_only_when_their_bucket_can_lend_them() {
    let comm = Communicator::single();

    let mut optimizer = Sgd::new(0.1).momentum(0.9);
    let mut model = Lendable::new(&comm, 0).unwrap();
    let grads = model.new_grads();
    let in_flight = forward_and_backward(&mut model, grads, &comm, &mut optimizer);
    assert!(Lendable::SCHEDULE.params().all(|p| model.param(p).is_empty()), "every parameter is lent");
    let forward = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        model.forward(&batch().0, &mut LendableWorkspace::default());
    }));
    let message = forward.expect_err("forward without the parameters");
    let message = message.downcast_ref::<String>().map(String::as_str).unwrap_or_default();
    assert!(message.contains("`step` takes them back from the buckets `backward` returned"), "{message}");
    // Saving them then would write a file of nothing: refused, naming a parameter.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lent.safetensors");
    let saved = overlap::params_file::save_params(&model, &path).unwrap_err().to_string();
    assert!(saved.contains("Lendable's parameter `") && saved.contains("` is lent to a step in progress"), "{saved}");
    assert!(!path.exists(), "no file written");
    model.step(in_flight, &mut optimizer).unwrap();
    assert!(holds_all(&model), "every parameter is back");
    overlap::params_file::save_params(&model, &path).unwrap();
    assert!(optimizer.momentum_buffer(0).is_some(), "the optimizer has its state back");

    let mut optimizer = Sgd::new(0.1).momentum(0.9);
    let mut model = WithGain::new(&comm, 0).unwrap();
    let grads = model.new_grads();
    let in_flight = forward_and_backward(&mut model, grads, &comm, &mut optimizer);
    assert!(holds_all(&model), "a bucket with a parameter that cannot be lent lends none");
    model.step(in_flight, &mut optimizer).unwrap();
}

/// The message of a panic `f` raises.
fn panic_message(f: impl FnOnce()) -> String {
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("a panic");
    panic.downcast_ref::<String>().cloned().unwrap_or_default()
}

/// Misuses of a loop of one's own that the types allow: another model's buckets given to
/// `step` (an error, and nothing moved), the state lent by one optimizer given back to another
/// kind (a panic naming both), and a second `backward` before `step` (a panic saying so).
#[test]
fn step_refuses_another_model_s_buckets_and_another_optimizer_s_state() {
    let comm = Communicator::single();
    let (mut model, mut other) = (Lendable::new(&comm, 0).unwrap(), Lendable::new(&comm, 5).unwrap());
    let before: Vec<Vec<f32>> = Lendable::SCHEDULE.params().map(|p| other.param(p).to_vec()).collect();
    let mut optimizer = Sgd::new(0.1).momentum(0.9);
    let in_flight = {
        let grads = model.new_grads();
        forward_and_backward(&mut model, grads, &comm, &mut optimizer)
    };
    let refused = other.step(in_flight, &mut optimizer).err().expect("another model's buckets").to_string();
    assert!(refused.contains("carries another model's parameters"), "{refused}");
    let after: Vec<Vec<f32>> = Lendable::SCHEDULE.params().map(|p| other.param(p).to_vec()).collect();
    assert_eq!(before, after, "the other model keeps its own parameters");

    let mut model = Lendable::new(&comm, 0).unwrap();
    let mut sgd = Sgd::new(0.1).momentum(0.9);
    let in_flight = {
        let grads = model.new_grads();
        forward_and_backward(&mut model, grads, &comm, &mut sgd)
    };
    let message = panic_message(|| {
        let _ = model.step(in_flight, &mut AdamW::new(0.01));
    });
    assert!(message.contains("AdamW: the state of parameter"), "{message}");
    assert!(message.contains("give `step` the optimizer that `backward` was given"), "{message}");

    let mut model = Lendable::new(&comm, 0).unwrap();
    let mut sgd = Sgd::new(0.1);
    let _in_flight = {
        let grads = model.new_grads();
        forward_and_backward(&mut model, grads, &comm, &mut sgd)
    };
    let message = panic_message(|| {
        let _ = {
            let grads = model.new_grads();
            forward_and_backward(&mut model, grads, &comm, &mut sgd)
        };
    });
    assert!(message.contains("call `step` before the next `backward`"), "{message}");
}

/// Whether every gradient `step` handed back is zero, after two steps of `M` on `comm`.
fn hands_back_cleared_gradients<M: DistributedModel>(comm: &Communicator, optimizer: &mut impl Optimizer) -> bool {
    let mut model = M::new(comm, 5).unwrap();
    let mut grads = model.new_grads();
    for _ in 0..2 {
        let in_flight = forward_and_backward(&mut model, grads, comm, optimizer);
        comm.backward_done();
        grads = model.step(in_flight, optimizer).unwrap();
        if !grads.buckets().iter().all(|b| b.as_slice().iter().all(|&g| g == 0.0)) {
            return false;
        }
    }
    true
}

/// Every way a bucket's update can run on `comm`: lent (SGD, AdamW), after the wait point (an
/// optimizer that cannot lend, a layer that cannot, `--check-finite`), with either name of the
/// failing case.
fn check_every_update_path(mut comm: Communicator) {
    let sgd = || Sgd::new(0.1).momentum(0.9);
    let cases: [(&str, bool); 4] = [
        ("lent, SGD", hands_back_cleared_gradients::<Lendable>(&comm, &mut sgd())),
        ("lent, AdamW", hands_back_cleared_gradients::<Lendable>(&comm, &mut AdamW::new(0.01))),
        ("after the wait", hands_back_cleared_gradients::<Lendable>(&comm, &mut AfterWait(sgd()))),
        ("a layer that cannot lend", hands_back_cleared_gradients::<WithGain>(&comm, &mut sgd())),
    ];
    for (case, cleared) in cases {
        assert!(cleared, "{case}: `step` handed back gradients that are not zero");
    }
    comm.set_check_finite(true);
    assert!(hands_back_cleared_gradients::<Lendable>(&comm, &mut sgd()), "--check-finite: not cleared");
}

#[test]
fn step_hands_back_cleared_gradients() {
    check_every_update_path(Communicator::single());
    check_every_update_path(Communicator::single().with_mode(CommMode::Skip));
}

#[test]
fn two_ranks_hand_back_cleared_gradients_with_either_transport() {
    common::run_on_two_ranks_each_way("ranks_hand_back_cleared_gradients");
}

/// The body of `two_ranks_hand_back_cleared_gradients_with_either_transport`, on each rank.
#[test]
#[ignore = "runs under mpirun, started by two_ranks_hand_back_cleared_gradients_with_either_transport"]
fn ranks_hand_back_cleared_gradients() {
    check_every_update_path(common::two_rank_communicator());
}
