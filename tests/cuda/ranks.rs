//! NCCL: the sums under the backward kernels on one GPU, overlap against no overlap, and ranks on
//! several GPUs training as CPU ranks do.

use overlap::cuda::gpu_count;

use crate::common;
use crate::training::{assert_params_close, word_text};

/// The mlp example on one GPU with a trace: every bucket is summed by NCCL (even at world size 1),
/// on the communication stream, and the first one starts while backward kernels still run.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn on_one_gpu_nccl_sums_each_bucket_under_the_backward_kernels() {
    let root = common::scratch("cuda-trace");
    let trace = root.path().join("trace.json");
    let out = std::process::Command::new(common::example("mlp"))
        .args(["--device", "cuda", "--steps", "4", "--batch", "64", "--trace", trace.to_str().unwrap()])
        .output()
        .expect("mlp starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mlp --device cuda failed:\n{stderr}");
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let spans: Vec<&serde_json::Value> =
        trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X" && e["args"]["step"] == 3).collect();
    let of = |cat: &str| spans.iter().filter(|e| e["cat"] == cat).copied().collect::<Vec<_>>();
    let (all_reduces, backward, waits) = (of("all-reduce"), of("backward"), of("wait"));
    assert!(waits.len() >= 2, "the mlp has several buckets, each with a wait point: {}", waits.len());
    assert_eq!(all_reduces.len(), waits.len(), "one NCCL span per bucket in step 3");
    let start = |e: &serde_json::Value| e["ts"].as_f64().unwrap();
    let end = |e: &serde_json::Value| start(e) + e["dur"].as_f64().unwrap();
    let first_sum = all_reduces.iter().map(|e| start(e)).fold(f64::INFINITY, f64::min);
    let backward_end = backward.iter().map(|e| end(e)).fold(0.0, f64::max);
    println!("step 3: first NCCL all-reduce at {first_sum:.1} us, backward ends at {backward_end:.1} us");
    assert!(first_sum < backward_end, "the first bucket's sum starts only after backward: nothing overlaps");
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn overlap_and_no_overlap_train_alike_on_the_gpu() {
    // Two GPUs under mpirun when both exist; otherwise one rank, still through NCCL. Without
    // mpirun a single process is one rank.
    let mpirun = common::mpirun_usable();
    let gpus = if mpirun { gpu_count().clamp(1, 2) } else { 1 };
    if !mpirun {
        println!("no usable mpirun here (none, or OVERLAP_TESTS_MPIRUN=off): one rank runs, as one process");
    }
    let exe = common::example("mlp");
    let run = |extra: &[&str], tag: &str| {
        let root = common::scratch("cuda-overlap");
        let file = root.path().join(format!("{tag}.safetensors"));
        let mut args = vec!["--device", "cuda", "--steps", "10", "--batch", "32"];
        args.extend_from_slice(&["--save-params", file.to_str().unwrap()]);
        args.extend_from_slice(extra);
        if mpirun {
            let n = gpus.to_string();
            let mut launch = vec!["-n", &n, exe.to_str().unwrap()];
            launch.extend_from_slice(&args);
            println!("{}", common::mpirun_ok(&launch));
        } else {
            let out = std::process::Command::new(&exe).args(&args).output().expect("mlp starts");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "mlp {args:?} failed:\n{stderr}");
        }
        common::load_sorted_params(&file)
    };
    println!("{gpus} rank(s), one GPU each");
    let (overlapped, baseline) = (run(&[], "overlap"), run(&["--no-overlap"], "no-overlap"));
    assert_eq!(overlapped, baseline, "the order of launches changed the sums");
}

/// Ranks on GPUs of their own train as as many CPU ranks do: the GPT example (attention,
/// residual blocks, the tied head's gradient summed before its bucket, clipping by the global
/// norm), with whole and with sharded optimizer state, every sum through NCCL between the
/// processes; three ranks when there are three GPUs, so that the shards differ in length. The
/// other multi-rank test compares the GPU with itself (overlap against no overlap), which a sum
/// that starts before its gradients are written passes; this one does not. SGD, since AdamW
/// turns the rounding noise of `c_attn`'s key bias (a gradient that is zero but for rounding)
/// into full steps on either device.
#[test]
#[ignore = "needs two NVIDIA GPUs and mpirun (scripts/gpu-check.sh runs it)"]
fn ranks_on_gpus_train_the_gpt_as_cpu_ranks() {
    let ranks = gpu_count().min(3);
    if !common::mpirun_usable() || ranks < 2 {
        // The GPU check counts this line: a test that compared nothing is not reported as passed.
        println!("SKIPPED: needs mpirun and two GPUs, found {} GPU(s): nothing to compare", gpu_count());
        return;
    }
    let dir = common::scratch("cuda-ranks");
    let text = word_text(dir.path());
    let exe = common::example("gpt");
    let run = |device: &str, extra: &[&str]| {
        let tag: String = extra.concat().chars().filter(char::is_ascii_alphanumeric).collect();
        let file = dir.path().join(format!("{device}{tag}.safetensors"));
        let n = ranks.to_string();
        let mut args = vec!["-n", &n, exe.to_str().unwrap(), "--device", device, "--text", text.to_str().unwrap()];
        args.extend_from_slice(&["--steps", "3", "--batch", "2", "--context", "16", "--optimizer", "sgd"]);
        args.extend_from_slice(&["--lr", "0.1", "--eval-every", "0", "--report", "off"]);
        args.extend_from_slice(&["--save-params", file.to_str().unwrap()]);
        args.extend_from_slice(extra);
        println!("{}", common::mpirun_ok(&args));
        common::load_sorted_params(&file)
    };
    // Clipping waits for every sum before the first update; without it each update waits for
    // its own bucket's sum alone.
    let clip_off = ["--clip-grad-norm", "off"];
    let sharded = ["--shard-optimizer"];
    let sharded_clip_off = ["--shard-optimizer", "--clip-grad-norm", "off"];
    for extra in [&[][..], &clip_off[..], &sharded[..], &sharded_clip_off[..]] {
        let (gpu, cpu) = (run("cuda", extra), run("cpu", extra));
        let what = format!("gpt {extra:?}, {ranks} GPUs vs {ranks} CPU ranks after 3 steps");
        assert_params_close(&gpu, &cpu, 1e-4, &what);
    }
}
