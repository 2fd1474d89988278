//! The program `#[distributed_model]` emits, run on a GPU: each layer call queues its cuBLAS
//! products and kernels (chosen by the layer's `DeviceOp`) on the compute stream, each launch an
//! NCCL all-reduce on the communication stream, each wait point a stream wait, each update a
//! fused optimizer kernel (those in `buckets`). The host never waits inside a step. Parameters
//! and optimizer state live here (`GpuParams`), by the parameter's index in the schedule.

mod buckets;
mod supported;

pub use supported::check_supported;
use supported::unsupported;

use cudarc::driver::{CudaEvent, CudaSlice, CudaViewMut};
use overlap_plan::Schedule;

use super::attention::{attention_buffers, Attention};
use super::clip::ClipPartials;
use super::gpu::{cuda, Gpu};
use super::nccl::{GpuComm, GpuInFlight};
use super::ops::{self, RowStats};
use super::params::GpuParams;
use super::shards::GpuShards;
use super::storage::{at_least, Cuda, GpuSaved, GpuTensor};
use super::timing::Timeline;
use crate::comm::CommMode;
use crate::error::{Error, Result};
use crate::layer::{DeviceOp, DropoutDraw, Layer, StepContext, TiedLayer};
use crate::program::{Compute, Tied};
use crate::trace::Activity;

/// What a step on the GPU keeps besides the model's workspace and buckets: the parameters and
/// their optimizer state, the buckets in flight, how gradients travel, and the trace's events.
pub struct GpuStep {
    /// The parameters and their optimizer state.
    pub params: GpuParams,
    /// Bucket `k`'s handle while it is summed (`GpuTicket { bucket: k }` stands for it).
    in_flight: Vec<Option<GpuInFlight>>,
    /// `CommMode::AfterBackward`: buckets held until backward ends.
    held: Vec<(usize, CudaSlice<f32>)>,
    mode: CommMode,
    world_size: usize,
    /// The timing events of the step's spans, read into the trace after it.
    pub timeline: Timeline,
    /// The bucket whose updates are being queued, and the event its span starts at.
    updating: Option<(usize, Option<CudaEvent>)>,
    /// Attention backward's work buffers: the heads' and the projections' gradients, and the
    /// scores'.
    scratch: [Option<CudaSlice<f32>>; 3],
    /// The gradient norm's partial sums, when the run clips.
    clip: ClipPartials,
}

impl GpuStep {
    /// A step on `params` for `schedule`'s buckets, which start as `mode` says across `world_size`
    /// ranks, timed by `timeline`.
    pub fn new(params: GpuParams, schedule: &Schedule, mode: CommMode, world_size: usize, timeline: Timeline) -> Self {
        GpuStep {
            params,
            in_flight: (0..schedule.buckets.len()).map(|_| None).collect(),
            held: Vec::new(),
            mode,
            world_size,
            timeline,
            updating: None,
            scratch: Default::default(),
            clip: ClipPartials::default(),
        }
    }

    /// How the next step's gradients travel (`Skip` for gradient-accumulation micro-steps is
    /// the generated `backward_no_sync_on`, which launches nothing).
    pub fn set_mode(&mut self, mode: CommMode) {
        self.mode = mode;
    }

    /// Forgets the buckets a failed step left in flight (each is freed after its sum).
    pub fn drop_in_flight(&mut self) {
        self.in_flight.iter_mut().for_each(|f| *f = None);
        self.held.clear();
        self.updating = None;
    }

    /// The executor of one call of the program.
    pub fn on<'a>(&'a mut self, gpu: &'a Gpu, comm: &'a GpuComm) -> GpuExec<'a> {
        GpuExec { gpu, comm, step: self, shards: None }
    }

    /// The executor of a backward or a step of a run that shards its optimizer state
    /// (`shards`: reduce-scatters instead of all-reduces, updates of this rank's parts, the
    /// all-gathers after them).
    pub fn sharding<'a>(
        &'a mut self,
        gpu: &'a Gpu,
        comm: &'a GpuComm,
        shards: Option<&'a mut GpuShards>,
    ) -> GpuExec<'a> {
        GpuExec { gpu, comm, step: self, shards }
    }
}

/// Runs the program's calls on one GPU.
pub struct GpuExec<'a> {
    gpu: &'a Gpu,
    comm: &'a GpuComm,
    step: &'a mut GpuStep,
    shards: Option<&'a mut GpuShards>,
}

impl Compute<Cuda> for GpuExec<'_> {
    fn new_bucket(&mut self, schedule: &Schedule, index: usize) -> Result<CudaSlice<f32>> {
        let bucket = &schedule.buckets[index];
        if bucket.low_rank.is_some() {
            return Err(Error::GradCommOnGpu { model: schedule.model.to_string(), chosen: "powersgd".into() });
        }
        self.gpu.compute().alloc_zeros::<f32>(bucket.numel.max(1)).map_err(cuda("allocating a gradient bucket"))
    }

    fn copy_input(&mut self, input: &GpuTensor, into: &mut GpuTensor) -> Result<()> {
        into.copy_from(self.gpu, input)
    }

    fn forward<L: Layer>(
        &mut self,
        index: usize,
        _layer: &L,
        ctx: &StepContext,
        x: &GpuTensor,
        y: &mut GpuTensor,
        saved: &mut GpuSaved,
    ) -> Result<()> {
        let (gpu, rows) = (self.gpu, ctx.row_count());
        let activity = Activity::Forward { layer: index as u32 };
        match L::DEVICE_OP {
            DeviceOp::Linear { input, output } => {
                y.resize(gpu, rows, output)?;
                let (w, b) = (self.step.params.of_layer(index, 0), self.step.params.of_layer(index, 1));
                self.step.timeline.span(gpu, activity, |gpu| {
                    ops::linear_forward(gpu, (input, output, rows), x.view(), w, b, &mut y.view_mut())
                })
            }
            DeviceOp::LayerNorm { width } => {
                y.resize(gpu, rows, width)?;
                let stats = row_stats(gpu, saved, rows)?;
                let (gamma, beta) = (self.step.params.of_layer(index, 0), self.step.params.of_layer(index, 1));
                self.step.timeline.span(gpu, activity, |gpu| {
                    let (mean, rstd) = stats;
                    let stats = RowStats { mean: &mut mean.as_view_mut(), rstd: &mut rstd.as_view_mut() };
                    ops::layer_norm_forward(gpu, (width, rows), x.view(), (gamma, beta), &mut y.view_mut(), stats)
                })
            }
            DeviceOp::Embedding { width, .. } => {
                y.resize(gpu, rows, width)?;
                let w = self.step.params.of_layer(index, 0);
                self.step.timeline.span(gpu, activity, |gpu| {
                    ops::embedding_forward(gpu, (rows, width), x.view(), w, &mut y.view_mut())
                })
            }
            DeviceOp::PositionEmbedding { positions, width } => {
                if ctx.positions() > positions {
                    return Err(Error::Config(format!(
                        "a position embedding of {positions} rows got sequences of {} positions",
                        ctx.positions()
                    )));
                }
                y.resize(gpu, rows, width)?;
                let w = self.step.params.of_layer(index, 0);
                self.step.timeline.span(gpu, activity, |gpu| {
                    ops::position_forward(gpu, (rows, ctx.positions(), width), x.view(), w, &mut y.view_mut())
                })
            }
            DeviceOp::CausalSelfAttention { width, heads } => {
                y.resize(gpu, rows, width)?;
                let shape = Attention { sequences: ctx.sequence_count(), t: ctx.positions(), width, heads };
                let draw = ctx.for_layer(index).dropout().for_weights(heads);
                let buffers = attention_buffers(gpu, saved, shape, draw.active())?;
                let params = [0, 1, 2, 3].map(|p| self.step.params.of_layer(index, p));
                self.step.timeline.span(gpu, activity, |gpu| shape.forward(gpu, x, params, (buffers, draw), y))
            }
            DeviceOp::Dropout => {
                y.resize(gpu, x.rows(), x.cols())?;
                let draw = ctx.for_layer(index).dropout();
                self.step.timeline.span(gpu, activity, |gpu| drop_out(gpu, draw, x, y))
            }
            DeviceOp::Unsupported | DeviceOp::TiedHead { .. } => Err(unsupported::<L>()),
            op => {
                y.resize(gpu, x.rows(), x.cols())?;
                let n = x.rows() * x.cols();
                self.step
                    .timeline
                    .span(gpu, activity, |gpu| ops::activation_forward(gpu, op, n, x.view(), &mut y.view_mut()))
            }
        }
    }

    fn backward<L: Layer>(
        &mut self,
        index: usize,
        _layer: &L,
        ctx: &StepContext,
        (x, y, saved): (&GpuTensor, &GpuTensor, &GpuSaved),
        dy: &GpuTensor,
        grads: &mut [CudaViewMut<'_, f32>],
        accumulate: bool,
        dx: Option<&mut GpuTensor>,
    ) -> Result<()> {
        let (gpu, rows) = (self.gpu, ctx.row_count());
        let activity = Activity::Backward { layer: index as u32 };
        let dx = match dx {
            Some(dx) => {
                dx.resize(gpu, x.rows(), x.cols())?;
                Some(dx)
            }
            None => None,
        };
        match (L::DEVICE_OP, grads) {
            (DeviceOp::Linear { input, output }, [dw, db]) => {
                let w = self.step.params.of_layer(index, 0);
                self.step.timeline.span(gpu, activity, |gpu| {
                    let mut dx = dx.map(GpuTensor::view_mut);
                    ops::linear_backward(
                        gpu,
                        (input, output, rows),
                        (x.view(), w, dy.view()),
                        (dw, db),
                        accumulate,
                        dx.as_mut(),
                    )
                })
            }
            (DeviceOp::LayerNorm { width }, [dgamma, dbeta]) => {
                let (mean, rstd) = saved.stats.as_ref().expect("forward saved LayerNorm's row statistics");
                let gamma = self.step.params.of_layer(index, 0);
                self.step.timeline.span(gpu, activity, |gpu| {
                    let mut dx = dx.map(GpuTensor::view_mut);
                    ops::layer_norm_backward(
                        gpu,
                        (width, rows),
                        (x.view(), dy.view(), gamma),
                        (mean.as_view(), rstd.as_view()),
                        (dgamma, dbeta),
                        accumulate,
                        dx.as_mut(),
                    )
                })
            }
            (DeviceOp::Embedding { vocab, width }, [dw]) => {
                let tokens = x.token_rows_for(&self.step.params.schedule().layers[index].name, vocab, rows)?;
                self.step.timeline.span(gpu, activity, |gpu| {
                    if let Some(dx) = dx {
                        // Token ids have no gradient.
                        gpu.compute().memset_zeros(&mut dx.view_mut()).map_err(cuda("clearing a token-id gradient"))?;
                    }
                    ops::embedding_backward(gpu, width, tokens, dy.view(), dw, accumulate)
                })
            }
            (DeviceOp::PositionEmbedding { width, .. }, [dw]) => self.step.timeline.span(gpu, activity, |gpu| {
                let shape = (ctx.sequence_count(), ctx.positions(), width);
                ops::position_backward(gpu, shape, dy.view(), dw, accumulate)?;
                match dx {
                    Some(dx) => {
                        gpu.compute().memcpy_dtod(&dy.view(), &mut dx.view_mut()).map_err(cuda("copying a gradient"))
                    }
                    None => Ok(()),
                }
            }),
            (DeviceOp::CausalSelfAttention { width, heads }, [dwa, dba, dwp, dbp]) => {
                let shape = Attention { sequences: ctx.sequence_count(), t: ctx.positions(), width, heads };
                let buffers = saved.attention.as_ref().expect("forward saved attention's buffers");
                let draw = ctx.for_layer(index).dropout().for_weights(heads);
                for (buffer, n) in self.step.scratch.iter_mut().zip([rows * width, rows * 3 * width, shape.scores()]) {
                    at_least(gpu, buffer, n)?;
                }
                let [Some(d_heads), Some(d_qkv), Some(ds)] = &mut self.step.scratch else {
                    unreachable!("allocated above")
                };
                let params = [0, 2].map(|p| self.step.params.of_layer(index, p));
                let timeline = &mut self.step.timeline;
                timeline.span(gpu, activity, |gpu| {
                    let mut dx = dx.map(GpuTensor::view_mut);
                    let work = (d_heads, d_qkv, ds);
                    let saved = (buffers, draw);
                    shape.backward(gpu, (x, dy), params, saved, work, [dwa, dba, dwp, dbp], accumulate, dx.as_mut())
                })
            }
            (DeviceOp::Dropout, []) => match dx {
                Some(dx) => {
                    let draw = ctx.for_layer(index).dropout();
                    self.step.timeline.span(gpu, activity, |gpu| drop_out(gpu, draw, dy, dx))
                }
                None => Ok(()),
            },
            (DeviceOp::Unsupported | DeviceOp::TiedHead { .. }, _) => Err(unsupported::<L>()),
            (op, []) => match dx {
                Some(dx) => {
                    let n = x.rows() * x.cols();
                    self.step.timeline.span(gpu, activity, |gpu| {
                        ops::activation_backward(gpu, op, n, (x.view(), y.view(), dy.view()), &mut dx.view_mut())
                    })
                }
                None => Ok(()), // a first layer without parameters: nothing needs its gradient
            },
            (op, grads) => panic!("{op:?} got {} parameter gradients", grads.len()),
        }
    }

    /// `y = x·Wᵀ` with the tied parameter's device copy as `W`.
    fn forward_tied<L: TiedLayer, W: Layer>(
        &mut self,
        index: usize,
        _: &L,
        tied: Tied<'_, W>,
        ctx: &StepContext,
        x: &GpuTensor,
        y: &mut GpuTensor,
        _: &mut GpuSaved,
    ) -> Result<()> {
        let DeviceOp::TiedHead { input, output } = L::DEVICE_OP else { return Err(unsupported::<L>()) };
        let (gpu, rows) = (self.gpu, ctx.row_count());
        y.resize(gpu, rows, output)?;
        let w = self.step.params.of_layer(tied.layer, tied.param);
        let activity = Activity::Forward { layer: index as u32 };
        self.step
            .timeline
            .span(gpu, activity, |gpu| ops::project(gpu, (input, output, rows), x.view(), w, &mut y.view_mut()))
    }

    /// The tied weight's gradient slot gets `dyᵀ·x`, written on a step's first backward
    /// (`accumulate` false: the slot still holds the last step's sums, which `clear` leaves) and
    /// added on later micro-steps; the embedding then adds its rows. `dx = dy·W`.
    fn backward_tied<L: TiedLayer, W: Layer>(
        &mut self,
        index: usize,
        _: &L,
        tied: Tied<'_, W>,
        ctx: &StepContext,
        (x, _, _): (&GpuTensor, &GpuTensor, &GpuSaved),
        dy: &GpuTensor,
        grad: &mut CudaViewMut<'_, f32>,
        accumulate: bool,
        mut dx: Option<&mut GpuTensor>,
    ) -> Result<()> {
        let DeviceOp::TiedHead { input, output } = L::DEVICE_OP else { return Err(unsupported::<L>()) };
        let beta = if accumulate { 1.0 } else { 0.0 };
        let (gpu, rows) = (self.gpu, ctx.row_count());
        if let Some(dx) = dx.as_deref_mut() {
            dx.resize(gpu, rows, input)?;
        }
        let w = self.step.params.of_layer(tied.layer, tied.param);
        let activity = Activity::Backward { layer: index as u32 };
        self.step.timeline.span(gpu, activity, |gpu| {
            let mut dx = dx.map(GpuTensor::view_mut);
            ops::project_backward(gpu, (input, output, rows), (x.view(), w, dy.view()), (grad, beta), dx.as_mut())
        })
    }

    fn set_sum(&mut self, into: &mut GpuTensor, a: &GpuTensor, b: &GpuTensor) -> Result<()> {
        into.resize(self.gpu, a.rows(), a.cols())?;
        ops::add(self.gpu, a.rows() * a.cols(), (a.view(), b.view()), &mut into.view_mut())
    }

    fn add_assign(&mut self, into: &mut GpuTensor, other: &GpuTensor) -> Result<()> {
        ops::add_into(self.gpu, other.rows() * other.cols(), other.view(), &mut into.view_mut())
    }
}

/// LayerNorm's row statistics for `rows` rows, allocated on first use or to grow.
fn row_stats<'s>(
    gpu: &Gpu,
    saved: &'s mut GpuSaved,
    rows: usize,
) -> Result<(&'s mut CudaSlice<f32>, &'s mut CudaSlice<f32>)> {
    if saved.stats.as_ref().is_none_or(|(mean, _)| mean.len() < rows) {
        let alloc = || gpu.compute().alloc_zeros::<f32>(rows.max(1)).map_err(cuda("allocating LayerNorm statistics"));
        saved.stats = Some((alloc()?, alloc()?));
    }
    let (mean, rstd) = saved.stats.as_mut().expect("allocated above");
    Ok((mean, rstd))
}

/// `to = from ∘ mask · scale` with `draw`'s mask (Dropout's forward and backward), a copy when
/// nothing is dropped; `to` already has `from`'s shape.
fn drop_out(gpu: &Gpu, draw: DropoutDraw, from: &GpuTensor, to: &mut GpuTensor) -> Result<()> {
    if draw.active() {
        ops::dropout(gpu, (from.rows(), from.cols()), draw, from.view(), &mut to.view_mut())
    } else {
        gpu.compute().memcpy_dtod(&from.view(), &mut to.view_mut()).map_err(cuda("copying through a dropout"))
    }
}
