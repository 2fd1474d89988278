//! Sharded optimizer state (`CommConfig::shard_optimizer`, `--shard-optimizer`,
//! `#[distributed_model(shard_optimizer)]`): the same parameters, bit for bit, as keeping the
//! whole state on every rank (SGD with momentum and AdamW, with and without accumulation, on 2, 3
//! and 4 ranks with uneven slices, through shared memory and MPI, with and without overlap);
//! checkpoints that resume sharded or not on another number of ranks; and every setting it
//! cannot run with refused by name before the first step.

mod common;

use overlap::prelude::*;
use overlap::{CommConfig, Matrix, OptimizerKind, ReportFormat, SyntheticClassification, WireFormat};

/// Three buckets of odd sizes (7·5 + 5 = 40 elements, 13·7 + 7 = 98, 7·13 + 13 = 104), so that
/// 3 and 4 ranks own slices that differ by an element and cut parameters in the middle.
#[distributed_model(bucket_cap_mb = 0.0001, first_bucket_mb = 0.0001)]
pub struct Small {
    fc1: Linear<7, 13>,
    act1: Relu,
    fc2: Linear<13, 7>,
    act2: Tanh,
    head: Linear<7, 5>,
}

/// `Small`, sharding its optimizer state unless the run says otherwise.
#[distributed_model(shard_optimizer, bucket_cap_mb = 0.0001, first_bucket_mb = 0.0001)]
pub struct SmallSharded {
    fc1: Linear<7, 13>,
    act1: Relu,
    fc2: Linear<13, 7>,
    act2: Tanh,
    head: Linear<7, 5>,
}

/// `Small` in one bucket, all-gathered one layer at a time (`gathers = per_layer`): each piece's
/// wait point before its layer.
#[distributed_model(shard_optimizer, gathers = per_layer, bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct SmallByLayer {
    fc1: Linear<7, 13>,
    act1: Relu,
    fc2: Linear<13, 7>,
    act2: Tanh,
    head: Linear<7, 5>,
}

/// `Small` with PowerSGD buckets, whose factors cannot be reduce-scattered.
#[distributed_model(bucket_cap_mb = 0.0001, first_bucket_mb = 0.0001, grad_comm = powersgd(rank = 2))]
pub struct SmallLowRank {
    fc1: Linear<7, 13>,
    act1: Relu,
    fc2: Linear<13, 7>,
    act2: Tanh,
    head: Linear<7, 5>,
}

/// `M` after 4 steps of `optimizer` with `accumulate` micro-steps, its state sharded or not.
fn train<M: DistributedModel>(
    comm: &Communicator,
    optimizer: OptimizerConfig,
    accumulate: usize,
    shard: Option<bool>,
) -> Vec<Vec<f32>> {
    train_over::<M>(comm, optimizer, accumulate, shard, (WireFormat::Fp32, false))
}

/// `train`, with the gradients on the wire in `wire`, and checked for finite sums with
/// `check_finite`.
fn train_over<M: DistributedModel>(
    comm: &Communicator,
    optimizer: OptimizerConfig,
    accumulate: usize,
    shard: Option<bool>,
    (wire, check_finite): (WireFormat, bool),
) -> Vec<Vec<f32>> {
    let mut model = M::new(comm, 11).unwrap();
    let mut data = SyntheticClassification::new(5, 7, 5);
    let settings = CommConfig {
        mode: comm.mode(),
        shard_optimizer: shard,
        grad_comm: Some(wire),
        check_finite,
        ..CommConfig::default()
    };
    Trainer::new(comm)
        .comm(settings)
        .optimizer(optimizer)
        .steps(4)
        .batch(6)
        .accumulate(accumulate)
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut data, &CrossEntropyLoss)
        .unwrap();
    M::SCHEDULE.params().map(|p| model.param(p).to_vec()).collect()
}

/// SGD with momentum and AdamW, each also clipped by a global norm every step exceeds (so that
/// the clipping factor is in every update).
fn optimizers() -> [OptimizerConfig; 4] {
    let adamw = OptimizerConfig { kind: OptimizerKind::AdamW, lr: Some(0.01), ..OptimizerConfig::default() };
    let clipped = |o: OptimizerConfig| OptimizerConfig { clip_grad_norm: Some(0.05), ..o };
    [OptimizerConfig::default(), adamw, clipped(OptimizerConfig::default()), clipped(adamw)]
}

/// On every rank of an mpirun job (see `common::run_on_ranks`): sharded and whole state give
/// the same bits, by the run's choice and by the model's attribute.
#[test]
#[ignore = "runs under mpirun (see sharded_state_gives_the_same_bits_on_2_3_4_and_7_ranks)"]
fn sharded_state_gives_the_same_bits_as_whole_state() {
    let comm = common::test_communicator();
    for optimizer in optimizers() {
        for accumulate in [1, 2] {
            let whole = train::<Small>(&comm, optimizer, accumulate, None);
            let what = format!(
                "{:?} clipped at {:?}, {accumulate} micro-step(s), {} ranks",
                optimizer.kind,
                optimizer.clip_grad_norm,
                comm.world_size()
            );
            if optimizer.clip_grad_norm.is_some() {
                let unclipped = OptimizerConfig { clip_grad_norm: None, ..optimizer };
                assert_ne!(train::<Small>(&comm, unclipped, accumulate, None), whole, "{what}: the clip acts");
            }
            assert_eq!(train::<Small>(&comm, optimizer, accumulate, Some(true)), whole, "{what}: sharded by the run");
            assert_eq!(
                train::<SmallSharded>(&comm, optimizer, accumulate, None),
                whole,
                "{what}: sharded by the model"
            );
            assert_eq!(train::<SmallSharded>(&comm, optimizer, accumulate, Some(false)), whole, "{what}: turned off");
            let by_layer = train::<SmallByLayer>(&comm, optimizer, accumulate, Some(false));
            assert_eq!(train::<SmallByLayer>(&comm, optimizer, accumulate, None), by_layer, "{what}: by layer");
        }
    }
    // Narrow formats: FP32 sums rounded once, the same bits as the unsharded narrow all-reduce.
    for (optimizer, wire) in optimizers().into_iter().zip([WireFormat::Bf16, WireFormat::Fp16].into_iter().cycle()) {
        let whole = train_over::<Small>(&comm, optimizer, 1, None, (wire, false));
        assert_ne!(whole, train::<Small>(&comm, optimizer, 1, None), "{wire} rounds");
        let what = format!("{:?} clipped at {:?}, {wire}", optimizer.kind, optimizer.clip_grad_norm);
        let sharded = train_over::<Small>(&comm, optimizer, 1, Some(true), (wire, false));
        assert_eq!(sharded, whole, "{what}: sharded by the run");
        let by_model = train_over::<SmallSharded>(&comm, optimizer, 1, None, (wire, false));
        assert_eq!(by_model, whole, "{what}: sharded by the model");
    }
    // The finiteness check (finite sums here) waits for every rank's norm and changes nothing.
    for optimizer in optimizers() {
        let whole = train::<Small>(&comm, optimizer, 1, None);
        let checked = train_over::<Small>(&comm, optimizer, 1, Some(true), (WireFormat::Fp32, true));
        assert_eq!(checked, whole, "{optimizer:?}: sharded and checked");
    }
}

/// One process shards nothing, but a sharded model still lends every bucket and, clipping,
/// updates after the global norm at the wait points.
#[test]
fn one_process_sharded_gives_the_same_bits_as_whole_state() {
    let comm = Communicator::single();
    for optimizer in optimizers() {
        let whole = train::<Small>(&comm, optimizer, 1, None);
        assert_eq!(train::<SmallSharded>(&comm, optimizer, 1, None), whole, "{optimizer:?}");
    }
}

/// The same bits driven by hand, without the `Trainer`: `backward`, `step`, and
/// `forward_gathering`, whose wait points give the gathered parameters back.
#[test]
#[ignore = "runs under mpirun (see sharded_state_gives_the_same_bits_on_2_3_4_and_7_ranks)"]
fn sharded_state_driven_by_hand_gives_the_same_bits() {
    let comm = common::test_communicator();
    let run = |optimizer: OptimizerConfig, shard: bool| {
        comm.apply(&CommConfig { mode: comm.mode(), shard_optimizer: Some(shard), ..CommConfig::default() }).unwrap();
        let mut model = Small::new(&comm, 11).unwrap();
        let mut optimizer = optimizer.build(&Small::SCHEDULE);
        let mut grads = model.new_grads();
        let x = Matrix::from_vec(6, 7, (0..42).map(|i| ((i * 5 + comm.rank()) % 11) as f32 / 11.0 - 0.5).collect());
        let labels: Vec<usize> = (0..6).map(|i| (i + comm.rank()) % 5).collect();
        for _ in 0..3 {
            let (mut ws, mut dy) = (<Small as DistributedModel>::Workspace::default(), Matrix::default());
            let logits = model.forward_gathering(&StepContext::rows(6), &x, &mut ws, &comm).unwrap();
            CrossEntropyLoss.forward_backward(logits, &labels, &mut dy);
            let in_flight = model.backward(&mut ws, &dy, grads, &comm, &mut optimizer);
            grads = model.step(in_flight, &mut optimizer).unwrap();
        }
        // The last step's all-gathers are still in flight.
        comm.finish_gathers(&mut model).unwrap();
        Small::SCHEDULE.params().map(|p| model.param(p).to_vec()).collect::<Vec<_>>()
    };
    for optimizer in optimizers() {
        assert_eq!(run(optimizer, true), run(optimizer, false), "{optimizer:?}, {} ranks", comm.world_size());
    }
}

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
        common::run_on_ranks("models_sharing_a_communicator_keep_their_own_sharding_default", 2, transport, mode);
        common::run_on_ranks("another_models_forward_before_a_sharded_models_gathers_is_an_error", 2, transport, mode);
    }
}

#[test]
fn sharded_state_gives_the_same_bits_on_2_3_4_and_7_ranks() {
    if !common::mpirun_available() {
        return;
    }
    for ranks in [2, 3, 4] {
        for transport in ["shared-memory", "mpi"] {
            common::run_on_ranks("sharded_state_gives_the_same_bits_as_whole_state", ranks, transport, "overlap");
        }
    }
    common::run_on_ranks("sharded_state_gives_the_same_bits_as_whole_state", 3, "shared-memory", "no-overlap");
    // 7 ranks: more ranks than the smallest parameters have elements, and shards of unequal
    // lengths wherever 7 does not divide a bucket's.
    common::run_on_ranks("sharded_state_gives_the_same_bits_as_whole_state", 7, "shared-memory", "overlap");
    for transport in ["shared-memory", "mpi"] {
        common::run_on_ranks("sharded_state_driven_by_hand_gives_the_same_bits", 3, transport, "overlap");
    }
}

#[test]
fn the_model_attribute_is_in_the_schedule_and_its_fingerprint() {
    let by_layer = SmallByLayer::SCHEDULE;
    assert_eq!((by_layer.buckets.len(), by_layer.gather_groups().len()), (1, 3));
    assert!(by_layer.to_string().contains("b0[138..242] before fc1, b0[40..138] before fc2, b0[0..40] before head"));
    let (sharded, whole) = (SmallSharded::SCHEDULE, Small::SCHEDULE);
    assert!(sharded.shard_optimizer && !whole.shard_optimizer);
    assert_ne!(whole.fingerprint(), sharded.fingerprint());
    // What a checkpoint records: the fingerprint the schedule has unsharded (what checkpoints of
    // unsharded models always held).
    let unsharded = overlap::plan::Schedule { shard_optimizer: false, ..sharded.clone() };
    assert_eq!(sharded.plan_fingerprint(), unsharded.fingerprint());
    assert_ne!(sharded.plan_fingerprint(), sharded.fingerprint());
    assert_eq!(whole.plan_fingerprint(), whole.fingerprint());
    assert!(sharded.to_string().contains("optimizer state sharded"));
    assert!(!whole.to_string().contains("sharded"));
}

#[test]
fn what_sharding_cannot_run_with_is_refused_by_name() {
    let comm = Communicator::single();
    let mut model = SmallLowRank::new(&comm, 1).unwrap();
    let sharded = CommConfig { shard_optimizer: Some(true), ..CommConfig::default() };
    let e = Trainer::new(&comm)
        .comm(sharded)
        .steps(1)
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut SyntheticClassification::new(5, 7, 5), &CrossEntropyLoss)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`CommConfig::shard_optimizer`") && e.contains("PowerSGD's buckets cannot be reduce-scattered"),
        "{e}"
    );
    // Turned off, the same model runs.
    let mut model = SmallLowRank::new(&comm, 1).unwrap();
    Trainer::new(&comm)
        .comm(CommConfig { shard_optimizer: Some(false), ..CommConfig::default() })
        .steps(1)
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut SyntheticClassification::new(5, 7, 5), &CrossEntropyLoss)
        .unwrap();
}

/// A layer that keeps its parameters to itself (no `Layer::param_vec_mut`, as the
/// `custom_layer` example's `Gain`) cannot lend them to a reduce-scatter: refused by name before
/// the first step, on one process as on several.
#[test]
fn a_layer_that_cannot_lend_its_parameters_is_refused_by_name() {
    let out = std::process::Command::new(common::example("custom_layer"))
        .args(["--steps", "1", "--batch", "2", "--report", "off", "--shard-optimizer"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--shard-optimizer shards the optimizer state"), "{stderr}");
    assert!(stderr.contains("does not expose its `Vec`") && stderr.contains("a Gain"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// One rank under mpirun has nothing to scatter or gather: sharded, with and without clipping, it
/// trains the unsharded run's parameters, bit for bit.
#[test]
fn one_rank_under_mpirun_trains_as_unsharded() {
    if !common::mpirun_available() {
        return;
    }
    let dir = common::scratch("shard-one-rank");
    let exe = common::example("mlp_zero");
    let (exe, wdir) = (exe.to_str().unwrap(), dir.path().to_str().unwrap());
    for clip in ["off", "0.05"] {
        let run = |shard: &str| {
            let out = format!("{}-{clip}.safetensors", shard.trim_start_matches("--"));
            let args = ["--wdir", wdir, "-n", "1", exe, "--steps", "3", "--batch", "4", "--report", "off"];
            common::mpirun_ok(&[&args[..], &[shard, "--clip-grad-norm", clip, "--save-params", &out]].concat());
            std::fs::read(dir.path().join(out)).unwrap()
        };
        assert!(run("--shard-optimizer") == run("--no-shard-optimizer"), "clipping {clip}: the parameters differ");
    }
}

/// Checkpoints of a sharded run are the files an unsharded run writes, and either resumes the
/// other on another number of ranks: 2 ranks to step 2, then 3 ranks to step 4, sharded first or
/// second, give the same bits (each phase sums in the same order both ways).
#[test]
fn checkpoints_resume_sharded_or_not_on_another_number_of_ranks() {
    if !common::mpirun_available() {
        return;
    }
    let dir = common::scratch("shard-checkpoints");
    std::fs::write(dir.path().join("t.txt"), "sharded optimizer state, gathered for checkpoints. ".repeat(30)).unwrap();
    let exe = common::example("gpt");
    let (exe, wdir) = (exe.to_str().unwrap(), dir.path().to_str().unwrap());
    let run = |ranks: &str, steps: &str, save: &str, extra: &[&str]| {
        let base = ["--wdir", wdir, "-n", ranks, exe, "--text", "t.txt", "--batch", "1", "--steps", steps];
        let quiet = ["--report", "off", "--eval-every", "0", "--save", save];
        common::mpirun_ok(&[&base[..], &quiet, extra].concat());
    };
    run("2", "2", "a", &["--shard-optimizer"]);
    run("2", "2", "b", &[]);
    run("3", "4", "a", &["--resume", "a"]);
    run("3", "4", "b", &["--resume", "b", "--shard-optimizer"]);
    let file = |run: &str, step: u32, name: &str| {
        std::fs::read(dir.path().join(run).join(format!("step-{step:08}")).join(name)).unwrap()
    };
    for step in [2, 4] {
        for name in ["model.safetensors", "optimizer.safetensors"] {
            let (a, b) = (file("a", step, name), file("b", step, name));
            assert!(a == b, "step {step}, {name}: the sharded and unsharded runs wrote different files");
        }
    }
    assert!(file("a", 2, "optimizer.safetensors").len() > 100_000, "the whole AdamW state was written");
}

/// Ranks that disagree on sharding stop with an error naming them, before any gradient moves.
#[test]
fn ranks_that_disagree_on_sharding_stop_with_an_error() {
    if !common::mpirun_available() {
        return;
    }
    let exe = common::example("mlp");
    let exe = exe.to_str().unwrap();
    let args = ["--steps", "1", "--batch", "2", "--report", "off"];
    let out =
        common::mpirun(&[&["-n", "1", exe, "--shard-optimizer"][..], &args, &[":", "-n", "1", exe], &args].concat());
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("ranks disagree on sharding the optimizer state: rank 0 shards it, rank(s) [1] does not"),
        "{text}"
    );
}

/// `--compute-only` on a sharded model updates each rank's own slices and gathers nothing: it
/// says so, since the loss then is no training's, and its report says nothing was all-reduced.
#[test]
fn compute_only_with_sharded_state_says_what_it_runs() {
    if !common::mpirun_available() {
        return;
    }
    let exe = common::example("mlp_zero");
    let out = common::mpirun(&["-n", "2", exe.to_str().unwrap(), "--steps", "2", "--batch", "2", "--compute-only"]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("note: compute-only with sharded optimizer state: each rank updates its own slice"),
        "{text}"
    );
    assert!(text.contains("compute-only: nothing is all-reduced"), "{text}");
    // With the finiteness check its wait points would update whole parameters from a slice of
    // the state (after a resume, which keeps only this rank's slices, a panic): refused.
    let checked = [exe.to_str().unwrap(), "--steps", "2", "--batch", "2", "--compute-only", "--check-finite"];
    let out = common::mpirun(&[&["-n", "2"][..], &checked].concat());
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && !text.contains("panicked"), "{text}");
    assert!(
        text.contains("--check-finite with --compute-only is not supported on sharded optimizer state (Mlp's"),
        "{text}"
    );
}

/// The `mlp_zero` example's trace on 2 ranks over a slow emulated link: each bucket is
/// reduce-scattered in backward; the all-gathers are launched after the last one in the order
/// forward reads them, each starts after its bucket's reduce-scatter, and the next forward waits
/// for each right before the first layer that reads it, computing while the later ones travel.
#[test]
fn the_all_gathers_run_in_the_next_forward() {
    if !common::mpirun_available() {
        return;
    }
    let dir = common::scratch("shard-trace");
    let path = dir.path().join("run.json");
    let exe = common::example("mlp_zero");
    let (exe, trace) = (exe.to_str().unwrap(), path.to_str().unwrap());
    let link = ["--link", "latency=10us,bandwidth=2GB/s", "--trace", trace];
    common::mpirun_ok(&[&["-n", "2", exe, "--steps", "3", "--batch", "8", "--report", "off"][..], &link].concat());
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let span = |step: u64, name: &str| {
        let found =
            events.iter().find(|e| e["ph"] == "X" && e["pid"] == 0 && e["args"]["step"] == step && e["name"] == name);
        let e = found.unwrap_or_else(|| panic!("step {step}: no span `{name}` on rank 0"));
        let start = e["ts"].as_f64().unwrap();
        (start, start + e["dur"].as_f64().unwrap(), e["args"]["queued_us"].as_f64())
    };
    // Buckets: b0 = head and fc3, b1 = fc2, b2 = fc1 (see the example).
    for step in [2, 3] {
        let mut queued = Vec::new();
        for (bucket, reader) in [(2, "fc1"), (1, "fc2"), (0, "fc3")] {
            let gather = span(step, &format!("all-gather b{bucket}"));
            let scatter = span(step - 1, &format!("reduce-scatter b{bucket}"));
            assert!(gather.0 >= scatter.1, "step {step}: b{bucket}'s all-gather starts after its reduce-scatter");
            let wait = span(step, &format!("wait all-gather b{bucket}"));
            let forward = span(step, &format!("{reader} forward"));
            assert!(
                forward.0 >= wait.1 && wait.1 >= gather.1,
                "step {step}: {reader} waits for b{bucket}'s all-gather"
            );
            queued.push(gather.2.unwrap());
        }
        assert!(queued.windows(2).all(|q| q[0] <= q[1]), "step {step}: launched in forward order: {queued:?}");
        let (fc1, gather_b1) = (span(step, "fc1 forward"), span(step, "all-gather b1"));
        assert!(fc1.0 < gather_b1.1, "step {step}: fc1's forward runs while fc2's parameters are gathered");
    }
}
