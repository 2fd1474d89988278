//! The CUDA backend against the CPU one. Built with `--features cuda`. Without a driver only the
//! tests that need no GPU run (the first checks the error users get); the others need an NVIDIA
//! GPU and are ignored unless asked for (`scripts/gpu-check.sh` runs them with
//! `--include-ignored`, from the bundle `scripts/gpu-bundle.sh` builds).

mod common;
#[path = "../runtime/tests/pytorch_adamw/mod.rs"]
mod pytorch_adamw;

use overlap::cuda::{
    driver_present, gpu_count, Cuda, Gpu, GpuComm, GpuCrossEntropy, GpuOptimizer, GpuParams, GpuShards, GpuStep,
    GpuTensor, Timeline,
};
use overlap::prelude::*;
use overlap::program::Program;
use overlap::{CommMode, CrossEntropyLoss, GradientBuckets, Matrix};
use overlap_cli::TrainArgs;

use clap::Parser;

/// Every layer kind the GPU runs, at small odd widths.
#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct Probe {
    fc1: Linear<16, 40>,
    act1: Gelu,
    norm: LayerNorm<40>,
    fc2: Linear<40, 33>,
    act2: Tanh,
    fc3: Linear<33, 24>,
    act3: Sigmoid,
    fc4: Linear<24, 24>,
    act4: Relu,
    head: Linear<24, 5>,
}

/// A deterministic batch of `rows` samples for `Probe`.
fn batch(rows: usize) -> (Matrix, Vec<usize>) {
    let mut inputs = Matrix::default();
    inputs.resize(rows, 16);
    for (i, v) in inputs.as_mut_slice().iter_mut().enumerate() {
        *v = ((i * 7919 % 113) as f32 / 113.0 - 0.5) * 2.0;
    }
    (inputs, (0..rows).map(|r| r * 3 % 5).collect())
}

/// `|a - b| / |b|`, Euclidean norms.
fn relative(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let diff: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum::<f64>().sqrt();
    let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>().sqrt();
    diff / norm.max(f64::MIN_POSITIVE)
}

#[test]
fn without_a_driver_the_error_says_so_and_with_one_the_gpu_opens() {
    match Gpu::open(0) {
        Err(e) if !driver_present() => {
            let message = e.to_string();
            assert!(message.contains("no CUDA driver found"), "{message}");
            println!("no CUDA driver here: {message}");
        }
        Err(e) => panic!("a driver is present but GPU 0 does not open: {e}"),
        Ok(gpu) => {
            assert!(driver_present());
            println!("opened {}", gpu.describe());
        }
    }
}

/// A user layer without device kernels (it keeps the default `DEVICE_OP`).
pub struct Halve;

impl Layer for Halve {
    const PARAMS: &'static [overlap::ParamDef] = &[];
    const WIDTH: overlap::Width = overlap::Width::Preserving;
    type Saved = ();
    fn init(_: &mut overlap::InitRng) -> Self {
        Halve
    }
    fn param(&self, _: usize) -> &[f32] {
        &[]
    }
    fn param_mut(&mut self, _: usize) -> &mut [f32] {
        &mut []
    }
    fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        output.clone_from(input);
        output.as_mut_slice().iter_mut().for_each(|v| *v *= 0.5);
    }
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        _: &StepContext,
        _: &Matrix,
        _: &Matrix,
        _: &(),
        dy: &Matrix,
        _: &mut [&mut [f32]],
        _: bool,
        dx: Option<&mut Matrix>,
    ) {
        if let Some(dx) = dx {
            dx.clone_from(dy);
            dx.as_mut_slice().iter_mut().for_each(|v| *v *= 0.5);
        }
    }
}

#[distributed_model]
pub struct WithUserLayer {
    fc: Linear<8, 8>,
    #[layer(params())]
    halve: Halve,
    head: Linear<8, 2>,
}

#[test]
fn a_layer_without_device_kernels_is_refused_by_name_without_a_gpu() {
    overlap::cuda::check_supported::<Probe>().expect("every built-in layer runs on the GPU");
    let message = overlap::cuda::check_supported::<WithUserLayer>().unwrap_err().to_string();
    assert!(message.contains("`halve` (Halve)") && message.contains("`TrainConfig::device` cpu"), "{message}");
    assert!(!message.contains("`fc`"), "{message}");
}

/// `model`'s loss and gradient buckets on the CPU for one batch: the program on the host.
fn cpu_gradients<M: DistributedModel>(
    model: &M,
    ctx: &StepContext,
    inputs: &Matrix,
    labels: &[usize],
) -> (f64, Vec<Vec<f32>>) {
    let mut ws = M::Workspace::default();
    let mut dlogits = Matrix::default();
    let logits = model.forward_with(ctx, inputs, &mut ws);
    let loss = CrossEntropyLoss.forward_backward(logits, labels, &mut dlogits);
    let mut grads = model.new_grads();
    model.backward_no_sync(&mut ws, &dlogits, &mut grads);
    (f64::from(loss), grads.buckets().iter().map(|b| b.as_slice().to_vec()).collect())
}

/// The same on GPU 0: the very program the CPU ran, with the GPU's storage and executor.
fn gpu_gradients<M: DistributedModel>(
    model: &mut M,
    ctx: &StepContext,
    inputs: &Matrix,
    labels: &[usize],
) -> (f64, Vec<Vec<f32>>) {
    let gpu = Gpu::open(0).expect("a GPU");
    let comm = GpuComm::new(&gpu, &Communicator::single(), false).unwrap();
    let params = GpuParams::new(&gpu, &*model, GpuOptimizer::Sgd(Sgd::new(0.1)), None).unwrap();
    let mut step = GpuStep::new(params, &M::SCHEDULE, CommMode::Skip, 1, Timeline::new(false));
    let mut dev = step.on(&gpu, &comm);
    let mut input = GpuTensor::default();
    input.upload(&gpu, inputs).unwrap();
    let labels: Vec<u32> = labels.iter().map(|&l| l as u32).collect();
    let (mut ws, mut loss) = (M::WorkspaceOn::<Cuda>::default(), GpuCrossEntropy::default());
    let logits = model.forward_on(&mut dev, ctx, &input, &mut ws).unwrap();
    loss.forward_backward(&gpu, logits, &labels).unwrap();
    let mut grads = model.new_grads_on(&mut dev).unwrap();
    model.backward_no_sync_on(&mut dev, &mut ws, loss.grad(), &mut grads).unwrap();
    let buckets = M::buckets_on(&grads).into_iter().map(|b| gpu.compute().clone_dtoh(b).unwrap()).collect();
    (loss.mean_loss(&gpu).unwrap(), buckets)
}

fn assert_same_gradients<M: DistributedModel>(model: M, rows: usize, features: usize, classes: usize) {
    let mut inputs = Matrix::default();
    inputs.resize(rows, features);
    for (i, v) in inputs.as_mut_slice().iter_mut().enumerate() {
        *v = ((i * 7919 % 113) as f32 / 113.0 - 0.5) * 2.0;
    }
    let labels: Vec<usize> = (0..rows).map(|r| r * 3 % classes).collect();
    assert_same_gradients_on(model, &StepContext::rows(rows), &inputs, &labels);
}

fn assert_same_gradients_on<M: DistributedModel>(mut model: M, ctx: &StepContext, inputs: &Matrix, labels: &[usize]) {
    let (cpu_loss, on_cpu) = cpu_gradients(&model, ctx, inputs, labels);
    let (gpu_loss, on_gpu) = gpu_gradients(&mut model, ctx, inputs, labels);
    assert!((gpu_loss - cpu_loss).abs() <= 1e-4 * cpu_loss.abs(), "loss {gpu_loss} vs {cpu_loss}");
    for (k, (cpu, gpu)) in on_cpu.iter().zip(&on_gpu).enumerate() {
        let d = relative(gpu, cpu);
        println!("{}: bucket b{k}: {} gradients, relative difference {d:e}", M::SCHEDULE.model, gpu.len());
        assert!(d <= 1e-4, "bucket b{k} differs from the CPU by {d:e}");
    }
}

/// Token and position embeddings, three sequences of five positions.
#[distributed_model(bucket_cap_mb = 1)]
pub struct TinyLm {
    wte: Embedding<13, 16>,
    wpe: PositionEmbedding<8, 16>,
    norm: LayerNorm<16>,
    head: Linear<16, 13>,
}

/// The head tied to the token embedding: one weight, two contributions to its gradient.
#[distributed_model(bucket_cap_mb = 1)]
pub struct TiedLm {
    wte: Embedding<13, 16>,
    wpe: PositionEmbedding<8, 16>,
    norm: LayerNorm<16>,
    #[tied(wte)]
    head: TiedHead<16, 13>,
}

/// A GPT in miniature: embeddings, a residual causal self-attention block, the head.
#[distributed_model(bucket_cap_mb = 1)]
mod tiny_gpt {
    use overlap::prelude::*;

    #[residual]
    pub struct Attend {
        ln_1: LayerNorm<16>,
        attn: CausalSelfAttention<16, 4>,
    }

    pub struct TinyGpt {
        wte: Embedding<13, 16>,
        wpe: PositionEmbedding<8, 16>,
        attend: Attend,
        ln_f: LayerNorm<16>,
        lm_head: Linear<16, 13>,
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn attention_gradients_match_the_cpu() {
    let ids: Vec<f32> = (0..18).map(|i| ((i * 5 + i / 6) % 13) as f32).collect();
    let labels: Vec<usize> = (0..18).map(|i| (i * 7 + 2) % 13).collect();
    let ctx = StepContext::sequences(3, 6);
    assert_same_gradients_on(tiny_gpt::TinyGpt::init(6), &ctx, &Matrix::from_vec(18, 1, ids), &labels);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn embedding_gradients_match_the_cpu() {
    let ids: Vec<f32> = (0..15).map(|i| ((i * 7 + i / 5) % 13) as f32).collect();
    let labels: Vec<usize> = (0..15).map(|i| (i * 5 + 1) % 13).collect();
    let ctx = StepContext::sequences(3, 5);
    assert_same_gradients_on(TinyLm::init(4), &ctx, &Matrix::from_vec(15, 1, ids), &labels);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn tied_head_gradients_match_the_cpu() {
    let ids: Vec<f32> = (0..15).map(|i| ((i * 7 + i / 5) % 13) as f32).collect();
    let labels: Vec<usize> = (0..15).map(|i| (i * 5 + 1) % 13).collect();
    let ctx = StepContext::sequences(3, 5);
    assert_same_gradients_on(TiedLm::init(4), &ctx, &Matrix::from_vec(15, 1, ids), &labels);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn layer_gradients_match_the_cpu() {
    assert_same_gradients(Probe::init(7), 12, 16, 5);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn residual_block_gradients_match_the_cpu() {
    assert_same_gradients(residual_net::ResidualNet::init(3), 12, 4, 2);
}

/// An error path drops in-flight buckets without waiting for them (the step that owned them
/// failed): their memory is freed only after NCCL is done with it, and the next step runs
/// whole, with the same gradients as a step that never saw the failure.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn a_step_after_dropped_in_flight_buckets_runs_and_computes_the_same_gradients() {
    let rows = 12;
    let mut model = Probe::init(7);
    let (inputs, labels) = batch(rows);
    let labels32: Vec<u32> = labels.iter().map(|&l| l as u32).collect();
    let gpu = Gpu::open(0).expect("a GPU");
    let comm = GpuComm::new(&gpu, &Communicator::single(), false).unwrap();
    // A learning rate of 0: the steps leave the parameters as they are.
    let params = GpuParams::new(&gpu, &model, GpuOptimizer::Sgd(Sgd::new(0.0)), None).unwrap();
    let mut step = GpuStep::new(params, &Probe::SCHEDULE, CommMode::Overlap, 1, Timeline::new(false));
    let (mut input, mut loss, mut ws) =
        (GpuTensor::default(), GpuCrossEntropy::default(), ProbeWorkspaceOn::<Cuda>::default());
    input.upload(&gpu, &inputs).unwrap();
    let ctx = StepContext::rows(rows);
    let mut gradients = || {
        let mut dev = step.on(&gpu, &comm);
        let grads = model.new_grads_on(&mut dev).unwrap();
        let logits = model.forward_on(&mut dev, &ctx, &input, &mut ws).unwrap();
        loss.forward_backward(&gpu, logits, &labels32).unwrap();
        let in_flight = model.backward_on(&mut dev, &mut ws, loss.grad(), grads).unwrap();
        let grads = model.step_on(&mut dev, in_flight).unwrap();
        let summed: Vec<Vec<f32>> =
            Probe::buckets_on(&grads).into_iter().map(|b| gpu.compute().clone_dtoh(b).unwrap()).collect();
        let logits = model.forward_on(&mut dev, &ctx, &input, &mut ws).unwrap();
        loss.forward_backward(&gpu, logits, &labels32).unwrap();
        let dropped = model.backward_on(&mut dev, &mut ws, loss.grad(), grads).unwrap();
        drop(dropped);
        step.drop_in_flight();
        summed
    };
    let first = gradients();
    let after_a_drop = gradients();
    gpu.finish("the step after the dropped buckets").expect("no CUDA error after buckets were dropped in flight");
    assert_eq!(first, after_a_drop, "a step after dropped buckets computes the same gradients");
}

/// The AdamW kernel continues each state PyTorch handed over (`runtime/tests/adamw_pytorch.rs`)
/// with the bits PyTorch's CUDA kernels give, and within a few ulps of PyTorch's CPU results.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn adamw_kernel_rounds_as_pytorch_does_on_cuda() {
    let gpu = Gpu::open(0).expect("a GPU");
    let stream = gpu.compute();
    let upload = |host: &[f32]| {
        let mut device = stream.alloc_zeros::<f32>(host.len()).unwrap();
        stream.memcpy_htod(host, &mut device).unwrap();
        device
    };
    pytorch_adamw::check_cuda_kernel(|step, before, grad| {
        let (mut value, mut m, mut v) = (upload(&before.value), upload(&before.exp_avg), upload(&before.exp_avg_sq));
        let grad = upload(grad);
        let moments = (&mut m.as_view_mut(), &mut v.as_view_mut());
        overlap::cuda::ops::adamw_update(&gpu, step, &mut value.as_view_mut(), moments, grad.as_view(), 1.0).unwrap();
        let [value, exp_avg, exp_avg_sq] = [&value, &m, &v].map(|d| stream.clone_dtoh(d).unwrap());
        pytorch_adamw::Tensors { value, exp_avg, exp_avg_sq }
    });
}

/// Asserts that each tensor of `got` is within `tolerance` of the same tensor of `want` (relative
/// difference), printing every difference.
fn assert_params_close(
    got: &[(String, Vec<usize>, Vec<f32>)],
    want: &[(String, Vec<usize>, Vec<f32>)],
    tolerance: f64,
    what: &str,
) {
    for ((name, _, g), (_, _, w)) in got.iter().zip(want) {
        let d = relative(g, w);
        println!("{what}: {name} differs by {d:e}");
        assert!(d <= tolerance, "{what}: {name} differs by {d:e}");
    }
}

/// Trains `Probe` to step `steps` on `device` and returns its parameters.
fn train_probe(device: &str, steps: u32, extra: &[&str]) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    train::<Probe>(device, steps, extra)
}

/// `M` trained on one process of `device` as the command line would, its final parameters.
fn train<M: DistributedModel>(device: &str, steps: u32, extra: &[&str]) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let tag: String = extra.join("").chars().filter(char::is_ascii_alphanumeric).collect();
    let root = common::scratch("cuda");
    let file = root.path().join(format!("{device}{steps}{tag}.safetensors"));
    let steps = steps.to_string();
    let mut argv = vec!["probe", "--steps", &steps, "--log-every", "20", "--device", device];
    if !extra.contains(&"--batch") {
        argv.extend_from_slice(&["--batch", "16"]);
    }
    argv.extend_from_slice(&["--save-params", file.to_str().unwrap()]);
    argv.extend_from_slice(extra);
    let args = TrainArgs::parse_from(argv);
    let comm = Communicator::single();
    let summary = overlap_cli::train::<M>(&args, &comm).expect("training runs");
    println!("{device}: loss {:.5} -> {:.5}", summary.first_loss, summary.final_loss);
    common::load_sorted_params(&file)
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn one_rank_training_matches_the_cpu_after_20_steps() {
    for optimizer in ["sgd", "adamw"] {
        let cpu = train_probe("cpu", 20, &["--optimizer", optimizer]);
        let gpu = train_probe("cuda", 20, &["--optimizer", optimizer]);
        assert_params_close(&gpu, &cpu, 1e-3, &format!("{optimizer}, GPU vs CPU after 20 steps"));
    }
}

/// Residual blocks on the GPU: the generated program's sums and skip gradients, with the same
/// training as on the CPU.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn a_model_of_residual_blocks_trains_on_the_gpu_as_on_the_cpu() {
    for optimizer in ["sgd", "adamw"] {
        let cpu = train::<residual_net::ResidualNet>("cpu", 20, &["--optimizer", optimizer]);
        let gpu = train::<residual_net::ResidualNet>("cuda", 20, &["--optimizer", optimizer]);
        assert_params_close(&gpu, &cpu, 1e-3, &format!("{optimizer}, residual blocks, GPU vs CPU after 20 steps"));
    }
}

/// Clipping by the global norm on the GPU (the squares summed on the device, the factor folded
/// into the update kernels) trains as the CPU's clipping does.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn clipping_by_the_global_norm_matches_the_cpu() {
    for optimizer in ["sgd", "adamw"] {
        let clip = ["--optimizer", optimizer, "--clip-grad-norm", "0.05"];
        let cpu = train_probe("cpu", 20, &clip);
        let gpu = train_probe("cuda", 20, &clip);
        assert_params_close(&gpu, &cpu, 1e-3, &format!("{optimizer}, clipped to 0.05, GPU vs CPU after 20 steps"));
        let unclipped = train_probe("cpu", 20, &["--optimizer", optimizer]);
        assert!(relative(&unclipped[0].2, &cpu[0].2) > 1e-3, "{optimizer}: 0.05 clips nothing here");
    }
}

/// The tied weight's gradient slot over many steps: each step's first backward writes the
/// head's contribution over the last step's sums, which stay in the bucket, and the embedding's
/// rows are added to it (a head that added would train on every earlier step's gradients too).
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn a_tied_language_model_trains_on_the_gpu_as_on_the_cpu() {
    let dir = common::scratch("cuda-tied-text");
    let text = word_text(dir.path());
    for optimizer in ["sgd", "adamw"] {
        let extra = ["--optimizer", optimizer, "--text", text.to_str().unwrap(), "--batch", "4"];
        let cpu = train::<TiedLm>("cpu", 20, &extra);
        let gpu = train::<TiedLm>("cuda", 20, &extra);
        assert_params_close(&gpu, &cpu, 1e-3, &format!("{optimizer}, tied head, GPU vs CPU after 20 steps"));
    }
}

/// A text of 600 words from a vocabulary of 11 characters, written as `text.txt` in `dir`: the
/// character-level models' data in these tests.
fn word_text(dir: &std::path::Path) -> std::path::PathBuf {
    let text = dir.join("text.txt");
    let words = ["abc", "bad", "cafe", "fig", "hid", "jab", "dig", "ice"];
    let line: Vec<&str> = (0..600).map(|i| words[(i * 5 + i / 7) % words.len()]).collect();
    std::fs::write(&text, line.join(" ")).unwrap();
    text
}

/// Sharded optimizer state on the GPU: the reduce-scatter (grouped reduces), the updates of
/// this rank's parts and the all-gathers (grouped broadcasts) around them. On one GPU the shard
/// is every bucket whole, so the parameters must be the whole-state run's bit for bit; with
/// clipping too (the norm's partial sums summed over the ranks by NCCL).
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn sharded_optimizer_state_trains_as_whole_state_on_the_gpu() {
    for optimizer in ["sgd", "adamw"] {
        for clip in [&[][..], &["--clip-grad-norm", "0.05"][..]] {
            let extra: Vec<&str> = ["--optimizer", optimizer].iter().copied().chain(clip.iter().copied()).collect();
            let whole = train_probe("cuda", 12, &extra);
            let sharded = train_probe("cuda", 12, &[&extra[..], &["--shard-optimizer"]].concat());
            assert_eq!(sharded, whole, "{optimizer} {clip:?}: sharded state trains otherwise than whole state");
            let cpu = train_probe("cpu", 12, &[&extra[..], &["--shard-optimizer"]].concat());
            assert_params_close(&sharded, &cpu, 1e-3, &format!("{optimizer} {clip:?}, sharded, GPU vs CPU"));
        }
    }
}

/// One rank's parts of sharded state, on one GPU as if it were rank 1 of 3 (the NCCL paths
/// between ranks need several GPUs): each parameter's part is updated alone, with momentum kept
/// for that part alone, as the CPU's optimizer updates those elements of the whole parameter;
/// the rest stays as it was until the all-gathers.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn a_rank_s_parts_of_sharded_state_update_as_the_cpu_updates_them() {
    use overlap_runtime::optim::{ChosenOptimizer, OptimizerState};
    let gpu = Gpu::open(0).expect("a GPU");
    let schedule = Probe::SCHEDULE;
    let (model, sgd) = (Probe::init(5), Sgd::new(0.1).momentum(0.9));
    let shards = GpuShards::new(&gpu, &schedule, 3, 1);
    let mut params = GpuParams::new(&gpu, &model, GpuOptimizer::Sgd(sgd.clone()), Some((3, 1))).unwrap();
    let (mut cpu_model, mut cpu) = (Probe::init(5), sgd.clone());
    let mut parts = Vec::new();
    for p in schedule.params() {
        let info = schedule.param(p);
        let len = info.numel();
        let grad: Vec<f32> = (0..len).map(|i| ((i * 37 + info.index * 11) % 23) as f32 / 23.0 - 0.5).collect();
        let part = shards.owned(schedule.buckets[info.bucket].numel, info.offset, len);
        // Two updates: the momentum buffer's first (the gradient itself) and a later one.
        for _ in 0..2 {
            let on_gpu = gpu.compute().clone_htod(&grad).unwrap();
            if !part.is_empty() {
                params.update_part(&gpu, info.index, part.clone(), on_gpu.slice(part.clone()), 1.0).unwrap();
            }
            cpu.update(info.index, cpu_model.param_mut(p), &grad, 1.0);
        }
        parts.push((p, info.index, part));
    }
    let (mut gpu_model, mut saved) = (Probe::init(5), ChosenOptimizer::Sgd(sgd));
    params.save_state(&gpu, &mut gpu_model, &mut saved).unwrap();
    let (mut owned, mut total) = (0, 0);
    for (p, index, part) in parts {
        let (initial, got, want) = (model.param(p), gpu_model.param(p), cpu_model.param(p));
        for (i, &g) in got.iter().enumerate() {
            let expected = if part.contains(&i) { want[i] } else { initial[i] };
            assert!(
                (g - expected).abs() <= 1e-6 * expected.abs().max(1.0),
                "parameter {index}[{i}]: {g} vs {expected}"
            );
        }
        match (saved.buffers(index), part.is_empty()) {
            (None, true) => {}
            (Some(buffers), false) => {
                let want = &cpu.momentum_buffer(index).expect("the CPU kept momentum")[part.clone()];
                assert_eq!(buffers[0].len(), part.len(), "parameter {index}: state for its part alone");
                for (g, w) in buffers[0].iter().zip(want) {
                    assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "parameter {index}'s momentum: {g} vs {w}");
                }
            }
            (state, _) => {
                panic!("parameter {index} owns {part:?} and keeps {:?} values of state", state.map(|b| b[0].len()))
            }
        }
        (owned, total) = (owned + part.len(), total + got.len());
    }
    assert!(owned > 0 && owned < total, "rank 1 of 3 owns {owned} of {total} values");
}

/// A checkpoint of sharded state written on the GPU holds whole state (joined as the CPU joins
/// it), so a run resumes from it without sharding as if it had never stopped.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn a_sharded_checkpoint_on_the_gpu_resumes_unsharded() {
    let root = common::scratch("cuda-resume-sharded");
    let (whole, split) = (root.path().join("whole"), root.path().join("split"));
    let (whole, split) = (whole.to_str().unwrap(), split.to_str().unwrap());
    let uninterrupted = train_probe("cuda", 10, &["--optimizer", "adamw", "--save", whole]);
    train_probe("cuda", 5, &["--optimizer", "adamw", "--shard-optimizer", "--save", split]);
    let resumed = train_probe("cuda", 10, &["--optimizer", "adamw", "--resume", split, "--save", split]);
    assert_eq!(uninterrupted, resumed, "5 sharded + resume + 5 whole steps differ from 10 whole");
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn four_micro_steps_equal_one_step_on_four_times_the_batch_on_the_gpu() {
    let accumulated = train_probe("cuda", 20, &["--accumulate", "4", "--batch", "4"]);
    let whole = train_probe("cuda", 20, &["--batch", "16"]);
    assert_params_close(&accumulated, &whole, 1e-4, "accumulation vs whole batch");
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn resuming_on_the_gpu_is_bitwise_identical_to_not_stopping() {
    for optimizer in ["sgd", "adamw"] {
        let root = common::scratch(&format!("cuda-resume-{optimizer}"));
        let (whole, split) = (root.path().join("whole"), root.path().join("split"));
        let (whole, split) = (whole.to_str().unwrap(), split.to_str().unwrap());
        let uninterrupted = train_probe("cuda", 10, &["--optimizer", optimizer, "--save", whole]);
        train_probe("cuda", 5, &["--optimizer", optimizer, "--save", split]);
        let resumed = train_probe("cuda", 10, &["--optimizer", optimizer, "--resume", split, "--save", split]);
        assert_eq!(uninterrupted, resumed, "{optimizer}: 5 + resume + 5 steps differ from 10");
    }
}

/// A checkpoint with SGD's momentum buffers, resumed without momentum: the buffers have nothing
/// to go to on either device, and both train on alike.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn a_momentum_checkpoint_resumes_without_momentum_on_the_gpu_as_on_the_cpu() {
    let root = common::scratch("cuda-resume-momentum");
    let mut resumed = Vec::new();
    for device in ["cpu", "cuda"] {
        let dir = root.path().join(device);
        let dir = dir.to_str().unwrap();
        train_probe(device, 5, &["--optimizer", "sgd", "--momentum", "0.9", "--save", dir]);
        resumed.push(train_probe(device, 10, &["--optimizer", "sgd", "--momentum", "0", "--resume", dir]));
    }
    assert_params_close(&resumed[1], &resumed[0], 1e-3, "resumed without momentum, GPU vs CPU");
}

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
    let mpirun = common::mpirun_available();
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

#[distributed_model(bucket_cap_mb = 1)]
mod residual_net {
    use overlap::prelude::*;

    #[residual]
    pub struct Block {
        fc: Linear<8, 8>,
        act: Gelu,
    }

    pub struct ResidualNet {
        input: Linear<4, 8>,
        block: Block,
        head: Linear<8, 2>,
    }
}

#[test]
fn a_model_with_residual_blocks_runs_on_the_gpu() {
    overlap::cuda::check_supported::<residual_net::ResidualNet>().expect("residual blocks run on the GPU");
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
    if !common::mpirun_available() || ranks < 2 {
        println!("needs mpirun and two GPUs, found {} GPU(s): nothing to compare", gpu_count());
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
