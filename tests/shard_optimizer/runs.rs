//! The examples sharded: what they cannot run with refused by name, one rank, checkpoints that
//! resume on another number of ranks, ranks that disagree, compute-only runs, and the trace.

use super::*;

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
        text.contains("ranks disagree on sharding the optimizer state: rank 0 shards it, rank(s) 1 does not"),
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
