//! `DistributedModel`: what `#[distributed_model]` implements for a struct of layers.
//!
//! The macro emits the straight-line parts (forward, the interleaved backward, the per-bucket
//! step); the generic parts that need no knowledge of the layers live here as provided methods.

use overlap_plan::{ParamRef, Schedule};

use crate::comm::{Communicator, GradBucket, ParamVecs};
use crate::error::Result;
use crate::layer::{DeviceOp, StepContext};
use crate::optim::Optimizer;
pub use crate::program::grad_scale;
use crate::program::Program;
use crate::tensor::Matrix;

/// A model whose backward pass and gradient communication were scheduled at compile time.
///
/// One training step is `forward` → loss → `backward` (which launches each bucket's all-reduce
/// as soon as backward completes it and returns the in-flight buckets) → `step` (which waits for
/// each bucket and finishes its parameters' update, and gives the buckets back). These run the
/// model's `Program` on the host; a GPU runs the same program with its own storage.
pub trait DistributedModel: Program + ParamVecs {
    /// The compiled plan: buckets, offsets, launch points.
    const SCHEDULE: Schedule;

    /// Activations, saved state and input gradients of one step; reused across steps.
    type Workspace: Default;
    /// The gradient buckets, owned between steps.
    type Grads: GradientBuckets;
    /// The gradient buckets while they are being reduced.
    type InFlight;
    /// Each layer's `Layer::DEVICE_OP`, in definition order: what the device backends run.
    const DEVICE_OPS: &'static [DeviceOp];
    /// Residual blocks, as `(first, last)` layer indices: layers `first..=last` compute `f`, and
    /// the block outputs `f(x) + x`. None in a chain of layers.
    const RESIDUALS: &'static [(usize, usize)] = &[];
    /// What the planner says of its plan beyond `SCHEDULE`, one line each (the plan `auto` or
    /// `profile` chose and its predicted step; a bucket order other than the default): the
    /// lines the model's doc comment shows, for `--print-schedule` to print too. None for a plan
    /// of size caps in ready order.
    const PLAN_NOTES: &'static [&'static str] = &[];

    /// Deterministic initialisation of every layer from `seed`, on this rank only.
    fn init(seed: u64) -> Self;

    /// Zeroed gradient buckets laid out as `SCHEDULE` says.
    fn new_grads(&self) -> Self::Grads;

    /// Runs every layer on `input`, `ctx.row_count()` rows grouped into sequences as `ctx` says,
    /// keeping what backward needs (the context included) in `ws`; returns the model output.
    fn forward_with<'w>(&self, ctx: &StepContext, input: &Matrix, ws: &'w mut Self::Workspace) -> &'w Matrix;

    /// `forward_with` after a step that sharded the optimizer state: waits for the all-gathers
    /// of the parameters, each right before the first layer that reads them, and gives them back
    /// to the model. What a training loop calls; equal to `forward_with` when nothing is in
    /// flight.
    fn forward_gathering<'w>(
        &mut self,
        ctx: &StepContext,
        input: &Matrix,
        ws: &'w mut Self::Workspace,
        comm: &Communicator,
    ) -> Result<&'w Matrix>;

    /// `forward_with` on rows of independent samples.
    fn forward<'w>(&self, input: &Matrix, ws: &'w mut Self::Workspace) -> &'w Matrix {
        self.forward_with(&StepContext::rows(input.rows()), input, ws)
    }

    /// Backward from `grad_output` (the loss gradient with respect to the output), launching
    /// each bucket's all-reduce right after the layer that completes it. It begins the
    /// optimizer's step: when the optimizer's update is element-wise (SGD, AdamW), each bucket's
    /// parameters and their state are lent to its all-reduce, which updates them as it sums;
    /// until `step` gives them back, the model cannot run `forward`.
    fn backward<O: Optimizer>(
        &mut self,
        ws: &mut Self::Workspace,
        grad_output: &Matrix,
        grads: Self::Grads,
        comm: &Communicator,
        optimizer: &mut O,
    ) -> Self::InFlight;

    /// Backward for a gradient-accumulation micro-step: adds to `grads`, communicates nothing.
    /// The next `backward` adds its own gradients and reduces the total.
    fn backward_no_sync(&self, ws: &mut Self::Workspace, grad_output: &Matrix, grads: &mut Self::Grads);

    /// Waits for each bucket, in launch order; then either takes back its parameters, updated
    /// during the all-reduce, or updates them with `optimizer` there. Averaging over ranks and
    /// micro-steps is folded into the update. The gradients come back cleared, ready for the
    /// next step (layers add into them: see `Layer::backward`).
    fn step<O: Optimizer>(&mut self, in_flight: Self::InFlight, optimizer: &mut O) -> Result<Self::Grads>;

    /// Parameter `p`'s values, flattened row-major (`Layer::param` of its layer).
    fn param(&self, p: ParamRef) -> &[f32];
    /// Parameter `p`'s values, to write: rank 0's broadcast, a checkpoint's or a parameter
    /// file's.
    fn param_mut(&mut self, p: ParamRef) -> &mut [f32];

    /// Builds the model on every rank: checks that all ranks compiled the same schedule (a clear
    /// error otherwise, never a hang), initialises from `seed`, and broadcasts rank 0's values.
    fn new(comm: &Communicator, seed: u64) -> Result<Self> {
        comm.check_same_schedule(&Self::SCHEDULE)?;
        let mut model = Self::init(seed);
        // A layer of one's own whose `init` sized a parameter otherwise than its `PARAMS` say
        // would fail at its first update, far from the cause.
        for p in Self::SCHEDULE.params() {
            let (held, declared) = (model.param(p).len(), Self::SCHEDULE.param(p).numel());
            if held != declared {
                return Err(crate::error::Error::Config(format!(
                    "`{}` holds {held} values after `Layer::init`, but its shape {:?} has {declared}: the layer's \
                     `init` and its `PARAMS` disagree",
                    Self::SCHEDULE.param_name(p),
                    Self::SCHEDULE.param(p).shape
                )));
            }
        }
        for p in Self::SCHEDULE.params() {
            comm.broadcast_from_root(model.param_mut(p))?;
        }
        Ok(model)
    }
}

/// Read access to gradient buckets that are not in flight.
pub trait GradientBuckets {
    /// Buckets in launch order.
    fn buckets(&self) -> Vec<&GradBucket>;
    /// The same, to restore what they carry from step to step (PowerSGD's state).
    fn buckets_mut(&mut self) -> Vec<&mut GradBucket>;
    /// Backward passes accumulated since the last step.
    fn micro_steps(&self) -> usize;
}

/// The rows of `M`'s token embedding, if it reads token ids: the ids it can look up.
pub fn token_rows<M: DistributedModel>() -> Option<usize> {
    M::DEVICE_OPS.iter().find_map(|op| match op {
        DeviceOp::Embedding { vocab, .. } => Some(*vocab),
        _ => None,
    })
}

/// The rows of `M`'s position embedding, if it has one: the longest sequence it reads (the
/// shortest table's, where it has several).
pub fn position_rows<M: DistributedModel>() -> Option<usize> {
    M::DEVICE_OPS
        .iter()
        .filter_map(|op| match op {
            DeviceOp::PositionEmbedding { positions, .. } => Some(*positions),
            _ => None,
        })
        .min()
}

/// The token ids `M` can both read and predict: its token embedding's rows and its output
/// classes, the smaller; `None` when it reads no token ids.
pub fn vocabulary_limit<M: DistributedModel>() -> Option<usize> {
    let rows = token_rows::<M>()?;
    Some(M::SCHEDULE.io_widths().map_or(rows, |(_, classes)| rows.min(classes)))
}
