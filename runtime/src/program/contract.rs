//! The traits of the device contract and the program's own, with the averaging factor every
//! device folds into its updates.

use overlap_plan::Schedule;

use crate::comm::BucketMember;
use crate::error::Result;
use crate::layer::{Layer, StepContext, TiedLayer};

/// Where a program's tensors live, and the types its values take there.
pub trait Storage: Sized + 'static {
    /// An activation or gradient matrix of a step.
    type Tensor: Default;
    /// What layer `L` keeps from forward for its backward.
    type Saved<L: Layer>: Default;
    /// One gradient bucket's flat buffer, laid out as `SCHEDULE` says.
    type Bucket;
    /// A mutable view of one parameter's gradient inside its bucket.
    type GradView<'a>;
    /// A bucket while its all-reduce runs; only `Settle::wait` gives it back.
    type InFlight;
    /// A PowerSGD bucket while its P factors are summed, then while its Q factors are.
    type LowRankP;
    /// A PowerSGD bucket while its Q factors are summed; only `Settle::wait_low_rank` gives it
    /// back.
    type LowRankQ;
    /// What a queued operation can fail with (`Infallible` on the host).
    type Error;

    /// Views of `ranges` (offset, length) of `bucket`, in increasing offset without overlap.
    fn views_mut<const N: usize>(bucket: &mut Self::Bucket, ranges: [(usize, usize); N]) -> [Self::GradView<'_>; N];
}

/// Runs the layers of a step on one device.
pub trait Compute<S: Storage> {
    /// Bucket `index` (in launch order) of `schedule`, zeroed, with PowerSGD's state where the
    /// schedule compresses it.
    fn new_bucket(&mut self, schedule: &Schedule, index: usize) -> std::result::Result<S::Bucket, S::Error>;

    /// `into = input` (the copy backward reads as the first layer's input).
    fn copy_input(&mut self, input: &S::Tensor, into: &mut S::Tensor) -> std::result::Result<(), S::Error>;

    /// Layer `index` (in definition order) computes `y` from `x`.
    fn forward<L: Layer>(
        &mut self,
        index: usize,
        layer: &L,
        ctx: &StepContext,
        x: &S::Tensor,
        y: &mut S::Tensor,
        saved: &mut S::Saved<L>,
    ) -> std::result::Result<(), S::Error>;

    /// Layer `index`'s gradients into `grads` (its parameters', in `Layer::PARAMS` order, added
    /// to when `accumulate`) and, when asked, its input's into `dx`; `kept` is what forward
    /// kept: the layer's input, output and saved state.
    #[allow(clippy::too_many_arguments)]
    fn backward<L: Layer>(
        &mut self,
        index: usize,
        layer: &L,
        ctx: &StepContext,
        kept: (&S::Tensor, &S::Tensor, &S::Saved<L>),
        dy: &S::Tensor,
        grads: &mut [S::GradView<'_>],
        accumulate: bool,
        dx: Option<&mut S::Tensor>,
    ) -> std::result::Result<(), S::Error>;

    /// Layer `index`, tied to `tied`'s parameter, computes `y` from `x` with that weight.
    #[allow(clippy::too_many_arguments)]
    fn forward_tied<L: TiedLayer, W: Layer>(
        &mut self,
        index: usize,
        layer: &L,
        tied: Tied<'_, W>,
        ctx: &StepContext,
        x: &S::Tensor,
        y: &mut S::Tensor,
        saved: &mut S::Saved<L>,
    ) -> std::result::Result<(), S::Error>;

    /// Layer `index`'s backward with the weight it is tied to: its contribution to that weight's
    /// gradient into `grad` (the tied parameter's view), its input's into `dx` when asked.
    #[allow(clippy::too_many_arguments)]
    fn backward_tied<L: TiedLayer, W: Layer>(
        &mut self,
        index: usize,
        layer: &L,
        tied: Tied<'_, W>,
        ctx: &StepContext,
        kept: (&S::Tensor, &S::Tensor, &S::Saved<L>),
        dy: &S::Tensor,
        grad: &mut S::GradView<'_>,
        accumulate: bool,
        dx: Option<&mut S::Tensor>,
    ) -> std::result::Result<(), S::Error>;

    /// `into = a + b` (a residual block's output).
    fn set_sum(&mut self, into: &mut S::Tensor, a: &S::Tensor, b: &S::Tensor) -> std::result::Result<(), S::Error>;

    /// `into += other` (a residual block's skip gradient).
    fn add_assign(&mut self, into: &mut S::Tensor, other: &S::Tensor) -> std::result::Result<(), S::Error>;
}

/// The parameter a tied layer reads (`#[tied(field)]`): parameter `param` of `owner`, layer
/// `layer` in definition order.
#[derive(Clone, Copy, Debug)]
pub struct Tied<'a, W> {
    /// Index of the layer that owns the parameter, in definition order.
    pub layer: usize,
    /// That layer, whose parameter is read as the weight.
    pub owner: &'a W,
    /// Index of the parameter within `owner`'s, in `Layer::PARAMS` order.
    pub param: usize,
}

/// `1 / (world size x micro-steps)`: turns summed gradients into the global mean, folded into
/// the update.
pub fn grad_scale(world_size: usize, micro_steps: usize) -> f32 {
    1.0 / (world_size * micro_steps) as f32
}

/// Where one parameter's gradient sits: its bucket, its index among the model's parameters, its
/// offset and length in the bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamSlot {
    /// Its bucket, in launch order.
    pub bucket: usize,
    /// Its position among the model's parameters in definition order: how the optimizer addresses
    /// its state.
    pub index: usize,
    /// Offset of its gradient in the bucket, in elements.
    pub offset: usize,
    /// Its number of elements.
    pub len: usize,
}

/// Starts the all-reduces of a step's buckets during backward, for model `M`.
pub trait Launch<M, S: Storage> {
    /// Averaging over ranks and `micro_steps` micro-steps, folded into the update.
    fn grad_scale(&self, micro_steps: usize) -> f32;

    /// Before the step's first launch (the optimizer's step count).
    fn begin_step(&mut self);

    /// Starts the all-reduce of `bucket`, bucket `index` in launch order (its parameters,
    /// `members`, may be lent to it and updated as it sums).
    fn launch(
        &mut self,
        index: usize,
        bucket: S::Bucket,
        members: &[BucketMember],
        model: &mut M,
        grad_scale: f32,
    ) -> std::result::Result<S::InFlight, S::Error>;

    /// Starts a PowerSGD bucket's P all-reduce.
    fn launch_low_rank(
        &mut self,
        index: usize,
        bucket: S::Bucket,
        members: &[BucketMember],
        model: &mut M,
        grad_scale: f32,
    ) -> std::result::Result<S::LowRankP, S::Error>;

    /// Turns a PowerSGD bucket from its P sums to its Q all-reduce.
    fn reduce_q(&mut self, p: S::LowRankP) -> std::result::Result<S::LowRankQ, S::Error>;

    /// Starts all-gather `group` (in launch order) of elements `elements` of bucket `bucket`'s
    /// updated shards, for the next forward, when its reduce-scatter kept them for it (the run
    /// shards the optimizer state). A device that never shards has nothing to start.
    fn launch_gather(
        &mut self,
        group: usize,
        bucket: usize,
        elements: std::ops::Range<usize>,
    ) -> std::result::Result<(), S::Error> {
        let _ = (group, bucket, elements);
        Ok(())
    }

    /// After the last launch of backward.
    fn backward_done(&mut self) -> std::result::Result<(), S::Error>;
}

/// The wait points of the all-gathers in forward, for model `M` (sharded optimizer state).
pub trait Gather<M, S: Storage> {
    /// Waits for all-gather `group` (in launch order), when it is in flight, and gives its
    /// parameters back to `model`.
    fn wait_gather(&mut self, group: usize, model: &mut M) -> Result<()>;

    /// Waits for every all-gather in flight, as `wait_gather` does.
    fn wait_all_gathers(&mut self, model: &mut M) -> Result<()>;
}

/// The wait points of a step's buckets and the updates after them, for model `M`.
pub trait Settle<M, S: Storage> {
    /// The wait point of bucket `index`: its sums, or why they did not come.
    fn wait(&mut self, index: usize, in_flight: S::InFlight) -> Result<S::Bucket>;

    /// The wait point of PowerSGD bucket `index`: its Q sums made into the approximate gradient
    /// sums (the lent parameters updated with them), or why they did not come.
    fn wait_low_rank(&mut self, index: usize, q: S::LowRankQ) -> Result<S::Bucket>;

    /// Takes back the parameters lent with `bucket`, updated; `false` when none were lent (the
    /// updates then follow, one `update` per parameter), an error when `model` did not lend them.
    fn give_back_updated(&mut self, bucket: &mut S::Bucket, model: &mut M) -> Result<bool>;

    /// Updates parameter `param` of `layer` from its summed gradient in `bucket`.
    fn update<L: Layer>(
        &mut self,
        layer: &mut L,
        param: usize,
        slot: ParamSlot,
        bucket: &S::Bucket,
        grad_scale: f32,
    ) -> Result<()>;

    /// Readies bucket `index` for the next step, after its updates.
    fn clear(&mut self, index: usize, bucket: &mut S::Bucket) -> Result<()>;

    /// Whether the updates need every bucket's sums first (clipping by the global norm): the
    /// step then waits for every bucket before the first update.
    fn clips(&mut self) -> bool;

    /// The factor of every update when `clips`: `grad_scale` times the clipping factor of the
    /// global norm of `buckets`' averaged sums (see `optim::GradClip`).
    fn clip(&mut self, buckets: &[&S::Bucket], grad_scale: f32) -> Result<f32>;
}

/// The program `#[distributed_model]` emits, generic over the device: what `DistributedModel`'s
/// methods run on the host, and what the GPU backend runs with its kernels and NCCL.
pub trait Program: Sized {
    /// What a step keeps from forward for backward (`<Model>WorkspaceOn<S>`).
    type WorkspaceOn<S: Storage>: Default;
    /// The gradient buckets between steps (`<Model>GradsOn<S>`).
    type GradsOn<S: Storage>;
    /// The buckets while they are summed (`<Model>InFlightOn<S>`).
    type InFlightOn<S: Storage>;

    /// The buckets of `grads`, in launch order.
    fn buckets_on<S: Storage>(grads: &Self::GradsOn<S>) -> Vec<&S::Bucket>;

    /// Zeroed buckets, as `SCHEDULE` lays them out.
    fn new_grads_on<S: Storage, E: Compute<S>>(&self, dev: &mut E) -> std::result::Result<Self::GradsOn<S>, S::Error>;

    /// Every layer on `input` (`ctx.row_count()` rows); returns the model's output.
    fn forward_on<'w, S: Storage, E: Compute<S>>(
        &self,
        dev: &mut E,
        ctx: &StepContext,
        input: &S::Tensor,
        ws: &'w mut Self::WorkspaceOn<S>,
    ) -> std::result::Result<&'w S::Tensor, S::Error>;

    /// `forward_on` after the step that sharded its optimizer state: the generated code places
    /// each all-gather's wait point right before the first layer that reads its parameters. This
    /// default, for a program without wait points, waits for every one in flight first.
    fn forward_gathering_on<'w, S: Storage, E: Compute<S>, G: Gather<Self, S>>(
        &mut self,
        dev: &mut E,
        gather: &mut G,
        ctx: &StepContext,
        input: &S::Tensor,
        ws: &'w mut Self::WorkspaceOn<S>,
    ) -> Result<&'w S::Tensor>
    where
        crate::error::Error: From<S::Error>,
    {
        gather.wait_all_gathers(self)?;
        Ok(self.forward_on(dev, ctx, input, ws)?)
    }

    /// Backward from `dy`, each bucket's all-reduce launched right after the layer that
    /// completes it.
    fn backward_on<S: Storage, E: Compute<S> + Launch<Self, S>>(
        &mut self,
        dev: &mut E,
        ws: &mut Self::WorkspaceOn<S>,
        dy: &S::Tensor,
        grads: Self::GradsOn<S>,
    ) -> std::result::Result<Self::InFlightOn<S>, S::Error>;

    /// Backward of a gradient-accumulation micro-step: adds to `grads`, launches nothing.
    fn backward_no_sync_on<S: Storage, E: Compute<S>>(
        &self,
        dev: &mut E,
        ws: &mut Self::WorkspaceOn<S>,
        dy: &S::Tensor,
        grads: &mut Self::GradsOn<S>,
    ) -> std::result::Result<(), S::Error>;

    /// Each bucket's wait point, in launch order, then its parameters' updates; when `dev`
    /// clips, every wait point first, then every bucket's updates.
    fn step_on<S: Storage, E: Settle<Self, S>>(
        &mut self,
        dev: &mut E,
        in_flight: Self::InFlightOn<S>,
    ) -> Result<Self::GradsOn<S>>;

    /// Bucket `index`'s updates after its wait point, factor `grad_scale`, and its `clear`.
    fn update_bucket_on<S: Storage, E: Settle<Self, S>>(
        &mut self,
        dev: &mut E,
        index: usize,
        bucket: &mut S::Bucket,
        grad_scale: f32,
    ) -> Result<()>;
}
