//! The program on the host: each layer call is the layer's own `Layer` method, each launch the
//! communicator's (which lends the bucket's parameters and the optimizer to its all-reduce), each
//! wait point the in-flight bucket's. Nothing here can fail but a wait.

use std::convert::Infallible;

use overlap_plan::{LayerInfo, Schedule};

use super::contract::{grad_scale, Compute, Gather, Launch, ParamSlot, Settle, Storage, Tied};
use super::fits::{gradient_fits_output, input_fits, input_gradient_fits, output_fits, params_home, Shown};
use crate::comm::{BucketMember, Communicator, GradBucket, InFlight, LowRankP, LowRankQ, ParamVecs};
use crate::error::Result;
use crate::layer::{Layer, StepContext, TiedLayer};
use crate::optim::Optimizer;
use crate::tensor::Matrix;
use crate::trace::{self, SpanGuard};

/// Tensors in this process's memory: `Matrix`, `GradBucket`, the communicator's handles.
#[derive(Clone, Copy, Debug, Default)]
pub struct Host;

impl Storage for Host {
    type Tensor = Matrix;
    type Saved<L: Layer> = L::Saved;
    type Bucket = GradBucket;
    type GradView<'a> = &'a mut [f32];
    type InFlight = InFlight;
    type LowRankP = LowRankP;
    type LowRankQ = LowRankQ;
    type Error = Infallible;

    #[inline]
    fn views_mut<const N: usize>(bucket: &mut GradBucket, ranges: [(usize, usize); N]) -> [&mut [f32]; N] {
        bucket.views_mut(ranges)
    }
}

/// The layers on the host (forward needs nothing else), with the model's layers as its schedule
/// describes them, so that a layer's broken contract is reported by its path (`blocks.2.fc`).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostCompute {
    layers: &'static [LayerInfo],
}

impl HostCompute {
    /// The layers of a model whose schedule describes them as `layers` (`Schedule::static_layers`).
    pub fn named(layers: &'static [LayerInfo]) -> Self {
        HostCompute { layers }
    }
}

/// Layer `index` as the checks name it: its path and type, or its index where no schedule names
/// it (a device made without one).
fn shown<L>(layers: &[LayerInfo], index: usize) -> Shown {
    Shown { path: layers.get(index).map(|l| l.name.to_string()), index, ty: std::any::type_name::<L>() }
}

/// The layers' calls on the host, written once for each type that computes there
/// (`HostCompute`, and `HostLaunch`, which backward drives): they read only `self.layers`.
macro_rules! host_compute_methods {
    () => {
        #[inline]
        fn new_bucket(&mut self, schedule: &Schedule, index: usize) -> std::result::Result<GradBucket, Infallible> {
            Ok(GradBucket::planned(schedule, index))
        }

        #[inline]
        fn copy_input(&mut self, input: &Matrix, into: &mut Matrix) -> std::result::Result<(), Infallible> {
            into.clone_from(input);
            Ok(())
        }

        #[inline]
        fn forward<L: Layer>(
            &mut self,
            index: usize,
            layer: &L,
            ctx: &StepContext,
            x: &Matrix,
            y: &mut Matrix,
            saved: &mut L::Saved,
        ) -> std::result::Result<(), Infallible> {
            let _span = trace::forward(index);
            params_home(layer, || shown::<L>(self.layers, index));
            input_fits::<L>(|| shown::<L>(self.layers, index), x);
            layer.forward(&ctx.for_layer(index), x, y, saved);
            output_fits::<L>(|| shown::<L>(self.layers, index), x, y);
            Ok(())
        }

        #[inline]
        fn backward<L: Layer>(
            &mut self,
            index: usize,
            layer: &L,
            ctx: &StepContext,
            (x, y, saved): (&Matrix, &Matrix, &L::Saved),
            dy: &Matrix,
            grads: &mut [&mut [f32]],
            accumulate: bool,
            dx: Option<&mut Matrix>,
        ) -> std::result::Result<(), Infallible> {
            let _span = trace::backward(index);
            gradient_fits_output(|| shown::<L>(self.layers, index), y, dy);
            params_home(layer, || shown::<L>(self.layers, index));
            let mut dx = dx;
            layer.backward(&ctx.for_layer(index), x, y, saved, dy, grads, accumulate, dx.as_deref_mut());
            input_gradient_fits(|| shown::<L>(self.layers, index), x, dx.as_deref());
            Ok(())
        }

        #[inline]
        fn forward_tied<L: TiedLayer, W: Layer>(
            &mut self,
            index: usize,
            layer: &L,
            tied: Tied<'_, W>,
            ctx: &StepContext,
            x: &Matrix,
            y: &mut Matrix,
            saved: &mut L::Saved,
        ) -> std::result::Result<(), Infallible> {
            let _span = trace::forward(index);
            input_fits::<L>(|| shown::<L>(self.layers, index), x);
            layer.forward_tied(tied.owner.param(tied.param), ctx, x, y, saved);
            Ok(())
        }

        #[inline]
        fn backward_tied<L: TiedLayer, W: Layer>(
            &mut self,
            index: usize,
            layer: &L,
            tied: Tied<'_, W>,
            ctx: &StepContext,
            (x, y, saved): (&Matrix, &Matrix, &L::Saved),
            dy: &Matrix,
            grad: &mut &mut [f32],
            accumulate: bool,
            dx: Option<&mut Matrix>,
        ) -> std::result::Result<(), Infallible> {
            let _span = trace::backward(index);
            gradient_fits_output(|| shown::<L>(self.layers, index), y, dy);
            layer.backward_tied(tied.owner.param(tied.param), ctx, x, y, saved, dy, grad, accumulate, dx);
            Ok(())
        }

        #[inline]
        fn set_sum(&mut self, into: &mut Matrix, a: &Matrix, b: &Matrix) -> std::result::Result<(), Infallible> {
            into.set_sum(a, b);
            Ok(())
        }

        #[inline]
        fn add_assign(&mut self, into: &mut Matrix, other: &Matrix) -> std::result::Result<(), Infallible> {
            into.add_assign(other);
            Ok(())
        }
    };
}

impl Compute<Host> for HostCompute {
    host_compute_methods!();
}

/// Backward on the host: the layers, and the communicator that starts each bucket's all-reduce
/// with its parameters and their optimizer state lent to it.
pub struct HostLaunch<'a, O: Optimizer> {
    comm: &'a Communicator,
    optimizer: &'a mut O,
    /// As `HostCompute`'s.
    layers: &'static [LayerInfo],
}

impl<'a, O: Optimizer> HostLaunch<'a, O> {
    /// Backward on `comm`, whose all-reduces update with `optimizer` the parameters lent to them.
    pub fn new(comm: &'a Communicator, optimizer: &'a mut O) -> Self {
        HostLaunch { comm, optimizer, layers: &[] }
    }

    /// The same, for a model whose schedule describes its layers as `layers`
    /// (`Schedule::static_layers`): a layer's broken contract is then reported by its path.
    pub fn named(comm: &'a Communicator, optimizer: &'a mut O, layers: &'static [LayerInfo]) -> Self {
        HostLaunch { comm, optimizer, layers }
    }
}

/// The step on the host: each bucket's wait point, then its parameters taken back updated, or
/// updated here.
pub struct HostSettle<'a, O: Optimizer> {
    optimizer: &'a mut O,
    /// The span of the bucket whose parameters are being updated, from its first update to its
    /// `clear`.
    updating: Option<SpanGuard>,
    /// The step's squared gradient norm, when sharded buckets await it for their updates (one
    /// process, or no communication: see `Communicator::lend_shard`).
    clip_sum_of_squares: Option<f64>,
}

impl<'a, O: Optimizer> HostSettle<'a, O> {
    /// The wait points and updates of a step with `optimizer`.
    pub fn new(optimizer: &'a mut O) -> Self {
        HostSettle { optimizer, updating: None, clip_sum_of_squares: None }
    }
}
impl<O: Optimizer> Compute<Host> for HostLaunch<'_, O> {
    host_compute_methods!();
}

impl<M: ParamVecs, O: Optimizer> Launch<M, Host> for HostLaunch<'_, O> {
    #[inline]
    fn grad_scale(&self, micro_steps: usize) -> f32 {
        grad_scale(self.comm.world_size(), micro_steps)
    }

    #[inline]
    fn begin_step(&mut self) {
        self.optimizer.begin_step();
    }

    #[inline]
    fn launch(
        &mut self,
        _index: usize,
        mut bucket: GradBucket,
        members: &[BucketMember],
        model: &mut M,
        grad_scale: f32,
    ) -> std::result::Result<InFlight, Infallible> {
        if updates_await_every_sum(self.optimizer, self.comm, &bucket) {
            bucket.measure_norm_on_arrival();
        }
        let lent = lendable(members, self.optimizer, self.comm, &bucket);
        Ok(self.comm.all_reduce_and_update(bucket, lent, model, self.optimizer, grad_scale))
    }

    #[inline]
    fn launch_low_rank(
        &mut self,
        _index: usize,
        bucket: GradBucket,
        members: &[BucketMember],
        model: &mut M,
        grad_scale: f32,
    ) -> std::result::Result<LowRankP, Infallible> {
        let lent = lendable(members, self.optimizer, self.comm, &bucket);
        Ok(self.comm.all_reduce_low_rank(bucket, lent, model, self.optimizer, grad_scale))
    }

    #[inline]
    fn reduce_q(&mut self, p: LowRankP) -> std::result::Result<LowRankQ, Infallible> {
        Ok(p.reduce_q(self.comm))
    }

    #[inline]
    fn launch_gather(
        &mut self,
        group: usize,
        bucket: usize,
        elements: std::ops::Range<usize>,
    ) -> std::result::Result<(), Infallible> {
        self.comm.launch_gather(group, bucket, elements);
        Ok(())
    }

    #[inline]
    fn backward_done(&mut self) -> std::result::Result<(), Infallible> {
        self.comm.backward_done();
        Ok(())
    }
}

impl<M: ParamVecs, O: Optimizer> Settle<M, Host> for HostSettle<'_, O> {
    #[inline]
    fn wait(&mut self, _index: usize, in_flight: InFlight) -> Result<GradBucket> {
        in_flight.wait()
    }

    #[inline]
    fn wait_low_rank(&mut self, _index: usize, q: LowRankQ) -> Result<GradBucket> {
        q.wait()
    }

    #[inline]
    fn give_back_updated(&mut self, bucket: &mut GradBucket, model: &mut M) -> Result<bool> {
        if let Some(sum_of_squares) = self.clip_sum_of_squares {
            bucket.apply_clipped(sum_of_squares);
        }
        bucket.give_back_updated(model, self.optimizer)
    }

    #[inline]
    fn update<L: Layer>(
        &mut self,
        layer: &mut L,
        param: usize,
        slot: ParamSlot,
        bucket: &GradBucket,
        grad_scale: f32,
    ) -> Result<()> {
        if self.updating.is_none() {
            self.updating = Some(trace::update(slot.bucket));
        }
        let grad = bucket.view(slot.offset, slot.len);
        self.optimizer.update(slot.index, layer.param_mut(param), grad, grad_scale);
        Ok(())
    }

    #[inline]
    fn clear(&mut self, _index: usize, bucket: &mut GradBucket) -> Result<()> {
        bucket.clear();
        self.updating = None;
        Ok(())
    }

    #[inline]
    fn clips(&mut self) -> bool {
        self.optimizer.grad_clip().is_some()
    }

    fn clip(&mut self, buckets: &[&GradBucket], grad_scale: f32) -> Result<f32> {
        let _span = trace::clip();
        let Some(clip) = self.optimizer.grad_clip() else { return Ok(grad_scale) };
        // Sharded buckets the communication thread updated after its own clip bring its norm.
        if let Some(norm) = buckets.iter().find_map(|b| b.clipped_norm()) {
            clip.record_norm(norm);
            return Ok(grad_scale);
        }
        let sum = buckets.iter().map(|b| b.clip_sum_of_squares()).sum();
        self.clip_sum_of_squares = buckets.iter().any(|b| b.awaits_clip()).then_some(sum);
        Ok(clip.scale(sum, grad_scale))
    }
}

/// The forward's all-gather wait points on the host: the communicator's.
pub struct HostGather<'a> {
    comm: &'a Communicator,
}

impl<'a> HostGather<'a> {
    /// The wait points of `comm`'s all-gathers.
    pub fn new(comm: &'a Communicator) -> Self {
        HostGather { comm }
    }
}

impl<M: ParamVecs> Gather<M, Host> for HostGather<'_> {
    #[inline]
    fn wait_gather(&mut self, group: usize, model: &mut M) -> Result<()> {
        self.comm.wait_gather(group, model)
    }

    #[inline]
    fn wait_all_gathers(&mut self, model: &mut M) -> Result<()> {
        self.comm.finish_gathers(model)
    }
}

/// The parameters to lend with `bucket`: none when the updates await every bucket's sums.
fn lendable<'m, O: Optimizer>(
    members: &'m [BucketMember],
    optimizer: &mut O,
    comm: &Communicator,
    bucket: &GradBucket,
) -> &'m [BucketMember] {
    if updates_await_every_sum(optimizer, comm, bucket) {
        &[]
    } else {
        members
    }
}

/// Whether the updates follow the step's last wait point: the run clips, so they need the global
/// norm of every bucket's sums, unless the optimizer state is sharded (whose lent updates wait
/// for the norm on the communication thread). Nothing is lent then, and each bucket's part of
/// the norm is taken as its sums arrive.
fn updates_await_every_sum<O: Optimizer>(optimizer: &mut O, comm: &Communicator, bucket: &GradBucket) -> bool {
    optimizer.grad_clip().is_some() && !comm.shards(bucket)
}
