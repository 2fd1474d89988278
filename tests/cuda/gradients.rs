//! Each layer's gradients on the GPU against the CPU's for one batch, and the AdamW kernel's
//! rounding against PyTorch's CUDA AdamW.

use overlap::cuda::{Cuda, Gpu, GpuComm, GpuCrossEntropy, GpuOptimizer, GpuParams, GpuStep, GpuTensor, Timeline};
use overlap::prelude::*;
use overlap::program::Program;
use overlap::{CommMode, CrossEntropyLoss, GradientBuckets, Matrix};

use crate::models::*;
use crate::{pytorch_adamw, relative};

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
    input.upload_batch::<M>(&gpu, inputs).unwrap();
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

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn attention_gradients_match_the_cpu() {
    let ids: Vec<f32> = (0..18).map(|i| ((i * 5 + i / 6) % 13) as f32).collect();
    let labels: Vec<usize> = (0..18).map(|i| (i * 7 + 2) % 13).collect();
    let ctx = StepContext::sequences(3, 6);
    let ids = Matrix::from_vec(18, 1, ids);
    assert_same_gradients_on(tiny_gpt::TinyGpt::init(6), &ctx, &ids, &labels);
    // Dropping the weights: the GPU's kernel draws the CPU's masks, in forward and backward.
    let dropping = ctx.with_dropout(overlap::DropoutDraw::new(0.3, 4, 36));
    assert_same_gradients_on(tiny_gpt::TinyGpt::init(6), &dropping, &ids, &labels);
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
fn two_heads_tied_to_one_embedding_sum_every_contribution_as_on_the_cpu() {
    let ids: Vec<f32> = (0..15).map(|i| ((i * 7 + i / 5) % 13) as f32).collect();
    let labels: Vec<usize> = (0..15).map(|i| (i * 5 + 1) % 13).collect();
    let ctx = StepContext::sequences(3, 5);
    assert_same_gradients_on(TwoHeadLm::init(4), &ctx, &Matrix::from_vec(15, 1, ids), &labels);
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

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn nested_residual_gradients_match_the_cpu() {
    assert_same_gradients(nested_net::NestedNet::init(3), 6, 8, 5);
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
/// with the bits of PyTorch's CUDA ops as read op by op from its source (`pytorch_cuda_step`;
/// not results PyTorch wrote on a GPU), and within 1e-6 of PyTorch's CPU results.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn adamw_kernel_rounds_as_pytorchs_cuda_ops_read_op_by_op() {
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
        overlap::cuda::adamw_update(&gpu, step, &mut value.as_view_mut(), moments, grad.as_view(), 1.0).unwrap();
        let [value, exp_avg, exp_avg_sq] = [&value, &m, &v].map(|d| stream.clone_dtoh(d).unwrap());
        pytorch_adamw::Tensors { value, exp_avg, exp_avg_sq }
    });
}
