//! A `#[distributed_model]` on the GPU. The struct's compiled schedule (`SCHEDULE`: which
//! bucket holds each gradient and at which offset, after which layer each bucket's all-reduce
//! starts) and its layers' kinds (`DEVICE_OPS`) are executed with cuBLAS and the NVRTC
//! kernels: the same plan as the CPU code the macro emits, queued on streams instead of run.
//! Parameters, gradient buckets, activations and optimizer state live on the device; a step
//! copies its input batch in and nothing out.

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use overlap_plan::{ParamRef, Schedule, Width};

use super::gpu::{cuda, Gpu};
use super::nccl::{GpuComm, GpuInFlight};
use super::ops::{self, RowStats};
use super::optim::{GpuOptimizer, ParamState};
use super::timing::Timeline;
use crate::comm::CommMode;
use crate::error::{Error, Result};
use crate::layer::DeviceOp;
use crate::model::DistributedModel;
use crate::optim::{ChosenOptimizer, OptimizerState};
use crate::trace::Activity;

/// Fails, naming them, when layers of `M` have no device kernels (their `Layer::DEVICE_OP` is
/// `Unsupported`). Needs no GPU, so the training loop asks before opening one.
pub fn check_supported<M: DistributedModel>() -> Result<()> {
    let schedule = M::SCHEDULE;
    if let Some(&(first, last)) = M::RESIDUALS.first() {
        return Err(Error::Cuda(format!(
            "{} cannot run on the GPU yet: its residual blocks (the first over `{}` to `{}`) run on the CPU only; \
             use `TrainConfig::device` cpu",
            schedule.model, schedule.layers[first].name, schedule.layers[last].name
        )));
    }
    let unsupported: Vec<String> = (schedule.layers.iter().zip(M::DEVICE_OPS))
        .filter(|(_, op)| **op == DeviceOp::Unsupported)
        .map(|(l, _)| format!("`{}` ({})", l.name, l.kind))
        .collect();
    if unsupported.is_empty() {
        return Ok(());
    }
    Err(Error::Cuda(format!(
        "{} cannot run on the GPU: layer(s) {} have no device kernels (their `Layer::DEVICE_OP` is `Unsupported`); \
         use `TrainConfig::device` cpu",
        schedule.model,
        unsupported.join(", ")
    )))
}

/// One layer's device tensors.
struct DeviceLayer {
    op: DeviceOp,
    input: usize,
    output: usize,
    params: Vec<CudaSlice<f32>>,
    /// `(bucket, offset, numel)` of each parameter's gradient.
    grads: Vec<(usize, usize, usize)>,
    state: Vec<ParamState>,
    /// This layer's output, `[rows, output]`, kept for backward.
    out: CudaSlice<f32>,
    /// LayerNorm's per-row mean and 1/std.
    stats: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
}

pub struct GpuModel {
    schedule: Schedule,
    layers: Vec<DeviceLayer>,
    /// Gradient buckets in launch order; `None` while one is in flight (its handle owns it).
    buckets: Vec<Option<CudaSlice<f32>>>,
    /// Buckets whose all-reduce starts after each layer's backward, by layer.
    launches: Vec<Vec<usize>>,
    rows: usize,
    classes: usize,
    input: CudaSlice<f32>,
    labels: CudaSlice<u32>,
    loss_rows: CudaSlice<f32>,
    /// The gradient flowing backward: `dy` of one layer in one, its `dx` into the other.
    flowing: [CudaSlice<f32>; 2],
    optimizer: GpuOptimizer,
}

impl GpuModel {
    /// Copies `model`'s parameters to the GPU and allocates everything a step of `rows` samples
    /// per rank needs. Fails, naming them, on layers without device kernels.
    pub fn new<M: DistributedModel>(gpu: &Gpu, model: &M, rows: usize, optimizer: GpuOptimizer) -> Result<Self> {
        let schedule = M::SCHEDULE;
        check_supported::<M>()?;
        if let Some(chosen) = schedule.grad_comm() {
            return Err(Error::GradCommOnGpu { model: schedule.model.to_string(), chosen });
        }
        let alloc = |n: usize| gpu.compute().alloc_zeros::<f32>(n.max(1)).map_err(cuda("allocating device memory"));
        let mut layers = Vec::with_capacity(schedule.layers.len());
        let mut width = schedule.layers.iter().find_map(|l| match l.width {
            Width::Fixed { input, .. } => Some(input),
            Width::Preserving => None,
        });
        let Some(features) = width else {
            return Err(Error::Config(format!("{} has no layer with fixed widths", schedule.model)));
        };
        let mut widest = features;
        for (index, (info, &op)) in schedule.layers.iter().zip(M::DEVICE_OPS).enumerate() {
            let (input, output) = match info.width {
                Width::Fixed { input, output } => (input, output),
                Width::Preserving => (width.unwrap_or(features), width.unwrap_or(features)),
            };
            width = Some(output);
            widest = widest.max(output);
            if rows.checked_mul(input.max(output)).is_none_or(|n| n > i32::MAX as usize) {
                return Err(Error::Config(format!(
                    "`TrainConfig::batch` {rows} is too large for layer `{}` on the GPU",
                    info.name
                )));
            }
            let mut params = Vec::new();
            let mut state = Vec::new();
            let mut grads = Vec::new();
            for (p, param) in info.params.iter().enumerate() {
                let values = model.param(ParamRef { layer: index, param: p });
                params.push(gpu.compute().clone_htod(values).map_err(cuda("copying parameters to the GPU"))?);
                state.push(optimizer.new_state(gpu, values.len())?);
                grads.push((param.bucket, param.offset, param.numel()));
            }
            let stats = match op {
                DeviceOp::LayerNorm { .. } => Some((alloc(rows)?, alloc(rows)?)),
                _ => None,
            };
            layers.push(DeviceLayer { op, input, output, params, grads, state, out: alloc(rows * output)?, stats });
        }
        let classes = width.unwrap_or(features);
        let mut launches = vec![Vec::new(); layers.len()];
        for (k, bucket) in schedule.buckets.iter().enumerate() {
            launches[bucket.launch_after].push(k);
        }
        let buckets = schedule.buckets.iter().map(|b| alloc(b.numel).map(Some)).collect::<Result<_>>()?;
        Ok(GpuModel {
            launches,
            buckets,
            rows,
            classes,
            input: alloc(rows * features)?,
            labels: gpu.compute().alloc_zeros::<u32>(rows.max(1)).map_err(cuda("allocating labels"))?,
            loss_rows: alloc(rows)?,
            flowing: [alloc(rows * widest)?, alloc(rows * widest)?],
            layers,
            schedule,
            optimizer,
        })
    }

    /// Copies a batch in and runs every layer and the loss, leaving the loss gradient flowing.
    pub fn forward_loss(&mut self, gpu: &Gpu, inputs: &[f32], labels: &[u32], timeline: &mut Timeline) -> Result<()> {
        assert_eq!(labels.len(), self.rows, "one label per row");
        let stream = gpu.compute();
        stream.memcpy_htod(inputs, &mut self.input).map_err(cuda("copying the batch in"))?;
        stream.memcpy_htod(labels, &mut self.labels).map_err(cuda("copying the labels in"))?;
        let rows = self.rows;
        for i in 0..self.layers.len() {
            let (before, rest) = self.layers.split_at_mut(i);
            let x = before.last().map_or(self.input.as_view(), |l| l.out.as_view());
            let layer = &mut rest[0];
            timeline.span(gpu, Activity::Forward { layer: i as u32 }, |gpu| layer.forward(gpu, rows, x))?;
        }
        let last = self.layers.last().expect("a model has layers");
        let (rows, classes) = (self.rows, self.classes);
        timeline.span(gpu, Activity::Loss, |gpu| {
            ops::cross_entropy(
                gpu,
                (rows, classes),
                last.out.as_view(),
                self.labels.as_view(),
                &mut self.loss_rows.as_view_mut(),
                &mut self.flowing[0].slice_mut(..rows * classes),
            )
        })
    }

    /// Mean loss of the last forward (copies `rows` floats out: call it only when logging).
    pub fn loss(&self, gpu: &Gpu) -> Result<f64> {
        let rows = gpu.compute().clone_dtoh(&self.loss_rows).map_err(cuda("copying the loss out"))?;
        Ok(rows[..self.rows].iter().map(|&l| f64::from(l)).sum::<f64>() / self.rows as f64)
    }

    /// Backward through every layer, starting each bucket's all-reduce right after the layer
    /// that completes it (`CommMode::Overlap`), after the whole backward (`AfterBackward`), or
    /// never (`Skip`, also for gradient-accumulation micro-steps). Parameter gradients are added
    /// to the buckets when `accumulate` is set. Returns the in-flight buckets in launch order.
    pub fn backward(
        &mut self,
        gpu: &Gpu,
        comm: &GpuComm,
        (mode, accumulate): (CommMode, bool),
        timeline: &mut Timeline,
    ) -> Result<Vec<GpuInFlight>> {
        self.restore_buckets(gpu)?;
        let mut in_flight = Vec::with_capacity(self.buckets.len());
        let mut dy_in = 0;
        for i in (0..self.layers.len()).rev() {
            let (before, rest) = self.layers.split_at_mut(i);
            let x = before.last().map_or(self.input.as_view(), |l| l.out.as_view());
            let layer = &rest[0];
            let [a, b] = &mut self.flowing;
            let (dy, dx) = if dy_in == 0 { (&*a, b) } else { (&*b, a) };
            let dy = dy.slice(..self.rows * layer.output);
            let mut dx = (i > 0).then(|| dx.slice_mut(..self.rows * layer.input));
            let (rows, buckets) = (self.rows, &mut self.buckets);
            timeline.span(gpu, Activity::Backward { layer: i as u32 }, |gpu| {
                with_gradient_views(buckets, &layer.grads, |grads| {
                    layer.backward(gpu, rows, (x, dy), (grads, accumulate), dx.as_mut())
                })
            })?;
            dy_in = 1 - dy_in;
            for &k in &self.launches[i] {
                let data = self.buckets[k].take().expect("a bucket is launched once per step");
                in_flight.push(match mode {
                    CommMode::Overlap => comm.all_reduce(k, data)?,
                    CommMode::AfterBackward => GpuInFlight::unreduced(k, data), // launched below
                    CommMode::Skip => GpuInFlight::unreduced(k, data),
                });
            }
        }
        in_flight.sort_by_key(|f| f.bucket);
        if mode == CommMode::AfterBackward {
            // As DDP without overlap: every reduction starts after backward, and the updates
            // start after all of them.
            let held = std::mem::take(&mut in_flight);
            for f in held {
                let k = f.bucket;
                let (data, _) = f.wait(gpu.compute())?;
                in_flight.push(comm.all_reduce(k, data)?);
            }
            timeline
                .span(gpu, Activity::WaitAll, |gpu| in_flight.iter().try_for_each(|f| f.order_before(gpu.compute())))?;
        }
        Ok(in_flight)
    }

    /// For each bucket in launch order: the compute stream waits for its sum (the host does
    /// not), then its parameters are updated; averaging (`scale`, see `grad_scale`) is folded in.
    pub fn step(&mut self, gpu: &Gpu, in_flight: Vec<GpuInFlight>, scale: f32, timeline: &mut Timeline) -> Result<()> {
        self.optimizer.begin_step();
        for flight in in_flight {
            let k = flight.bucket;
            let (data, all_reduce) = timeline.wait(gpu, k, |gpu| flight.wait(gpu.compute()))?;
            timeline.all_reduce(k, std::mem::size_of::<f32>() * data.len(), all_reduce);
            let params = self.schedule.buckets[k].params.clone();
            timeline.span(gpu, Activity::Update { bucket: k as u32 }, |gpu| {
                for p in params.iter() {
                    let info = self.schedule.param(*p);
                    let grad = data.slice(info.offset..info.offset + info.numel());
                    let layer = &mut self.layers[p.layer];
                    let (value, state) = (&mut layer.params[p.param], &mut layer.state[p.param]);
                    self.optimizer.update(gpu, value, state, grad, scale)?;
                }
                Ok(())
            })?;
            self.buckets[k] = Some(data);
        }
        Ok(())
    }

    /// Takes the buckets back without updating anything (after waiting for any reduction), so
    /// that their gradients can be read.
    pub fn keep_gradients(&mut self, gpu: &Gpu, in_flight: Vec<GpuInFlight>) -> Result<()> {
        for flight in in_flight {
            let k = flight.bucket;
            self.buckets[k] = Some(flight.wait(gpu.compute())?.0);
        }
        Ok(())
    }

    /// Copies every parameter back into `model` (for saving, or comparing with the CPU).
    pub fn download<M: DistributedModel>(&self, gpu: &Gpu, model: &mut M) -> Result<()> {
        for (index, layer) in self.layers.iter().enumerate() {
            for (p, values) in layer.params.iter().enumerate() {
                let host = gpu.compute().clone_dtoh(values).map_err(cuda("copying parameters out"))?;
                model.param_mut(ParamRef { layer: index, param: p }).copy_from_slice(&host);
            }
        }
        Ok(())
    }

    /// Copies the parameters into `model` and the optimizer state into `into` (a fresh
    /// optimizer of the same kind), for a checkpoint.
    pub fn save_state<M: DistributedModel>(&self, gpu: &Gpu, model: &mut M, into: &mut ChosenOptimizer) -> Result<()> {
        self.download(gpu, model)?;
        if let Some(step) = self.optimizer.step_count() {
            into.set_step_count(step);
        }
        for (index, state) in self.layers.iter().flat_map(|l| &l.state).enumerate() {
            if let Some(buffers) = state.download(gpu, &self.optimizer)? {
                into.set_buffers(index, &buffers.iter().map(Vec::as_slice).collect::<Vec<_>>());
            }
        }
        Ok(())
    }

    /// Restores the optimizer state a checkpoint loaded into `from` (parameters are restored by
    /// building the model from the loaded host model).
    pub fn load_state(&mut self, gpu: &Gpu, from: &ChosenOptimizer) -> Result<()> {
        for (index, state) in self.layers.iter_mut().flat_map(|l| &mut l.state).enumerate() {
            if let Some(buffers) = from.buffers(index) {
                state.upload(gpu, &buffers)?;
            }
        }
        Ok(())
    }

    /// Copies every gradient bucket out, in launch order (for the gradient tests).
    pub fn gradients(&mut self, gpu: &Gpu) -> Result<Vec<Vec<f32>>> {
        self.restore_buckets(gpu)?;
        let stream = gpu.compute();
        self.buckets
            .iter()
            .flatten()
            .map(|b| stream.clone_dtoh(b))
            .collect::<std::result::Result<_, _>>()
            .map_err(cuda("copying gradients out"))
    }

    /// Gives back, zeroed, every bucket a failed step lost: its in-flight handle was dropped on
    /// an error path (which freed the bucket only after its sum), so the next step starts whole
    /// instead of panicking on a missing bucket. The failed step's gradients are gone either way.
    fn restore_buckets(&mut self, gpu: &Gpu) -> Result<()> {
        for (bucket, info) in self.buckets.iter_mut().zip(self.schedule.buckets.iter()) {
            if bucket.is_none() {
                let fresh = gpu.compute().alloc_zeros::<f32>(info.numel.max(1));
                *bucket = Some(fresh.map_err(cuda("reallocating a gradient bucket lost by a failed step"))?);
            }
        }
        Ok(())
    }
}

/// Calls `work` with mutable views of one layer's parameter gradients (at most two), inside
/// the buckets that are not in flight. The schedule puts each gradient inside its bucket,
/// without overlaps, and launches a bucket only after the last layer that writes into it.
fn with_gradient_views<T>(
    buckets: &mut [Option<CudaSlice<f32>>],
    grads: &[(usize, usize, usize)],
    work: impl FnOnce(&mut [CudaViewMut<f32>]) -> T,
) -> T {
    fn open(bucket: Option<&mut Option<CudaSlice<f32>>>) -> &mut CudaSlice<f32> {
        bucket.and_then(Option::as_mut).expect("a bucket is written only before its launch")
    }
    match *grads {
        [] => work(&mut []),
        [(b, o, n)] => work(&mut [open(buckets.get_mut(b)).slice_mut(o..o + n)]),
        [(b1, o1, n1), (b2, o2, n2)] if b1 != b2 => {
            let [first, second] = buckets.get_disjoint_mut([b1, b2]).expect("two distinct buckets");
            let (first, second) = (open(Some(first)), open(Some(second)));
            work(&mut [first.slice_mut(o1..o1 + n1), second.slice_mut(o2..o2 + n2)])
        }
        [(b, o1, n1), (_, o2, n2)] => {
            // Both in one bucket: split it between them.
            let (mut low, mut high) = open(buckets.get_mut(b)).split_at_mut(o1.max(o2));
            if o1 < o2 {
                work(&mut [low.slice_mut(o1..o1 + n1), high.slice_mut(..n2)])
            } else {
                work(&mut [high.slice_mut(..n1), low.slice_mut(o2..o2 + n2)])
            }
        }
        _ => panic!("device layers have at most two parameters"),
    }
}

impl DeviceLayer {
    fn forward(&mut self, gpu: &Gpu, rows: usize, x: CudaView<f32>) -> Result<()> {
        let (input, output) = (self.input, self.output);
        let x = x.slice(..rows * input);
        let mut y = self.out.slice_mut(..rows * output);
        match self.op {
            DeviceOp::Linear { .. } => ops::linear_forward(
                gpu,
                (input, output, rows),
                x,
                self.params[0].as_view(),
                self.params[1].as_view(),
                &mut y,
            ),
            DeviceOp::LayerNorm { .. } => {
                let (mean, rstd) = self.stats.as_mut().expect("LayerNorm keeps row statistics");
                let stats = RowStats { mean: &mut mean.as_view_mut(), rstd: &mut rstd.as_view_mut() };
                ops::layer_norm_forward(
                    gpu,
                    (input, rows),
                    x,
                    (self.params[0].as_view(), self.params[1].as_view()),
                    &mut y,
                    stats,
                )
            }
            op => ops::activation_forward(gpu, op, rows * input, x, &mut y),
        }
    }

    fn backward(
        &self,
        gpu: &Gpu,
        rows: usize,
        (x, dy): (CudaView<f32>, CudaView<f32>),
        (grads, accumulate): (&mut [CudaViewMut<f32>], bool),
        dx: Option<&mut CudaViewMut<f32>>,
    ) -> Result<()> {
        let (input, output) = (self.input, self.output);
        let x = x.slice(..rows * input);
        match (self.op, grads) {
            (DeviceOp::Linear { .. }, [dw, db]) => ops::linear_backward(
                gpu,
                (input, output, rows),
                (x, self.params[0].as_view(), dy),
                (dw, db),
                accumulate,
                dx,
            ),
            (DeviceOp::LayerNorm { .. }, [dgamma, dbeta]) => {
                let (mean, rstd) = self.stats.as_ref().expect("LayerNorm keeps row statistics");
                ops::layer_norm_backward(
                    gpu,
                    (input, rows),
                    (x, dy, self.params[0].as_view()),
                    (mean.as_view(), rstd.as_view()),
                    (dgamma, dbeta),
                    accumulate,
                    dx,
                )
            }
            (op, []) => match dx {
                Some(dx) => ops::activation_backward(gpu, op, rows * input, (x, self.out.as_view(), dy), dx),
                None => Ok(()), // a first layer without parameters: nothing needs its gradient
            },
            (op, grads) => panic!("{op:?} got {} parameter gradients", grads.len()),
        }
    }
}
