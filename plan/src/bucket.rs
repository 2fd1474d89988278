//! Gradient buckets in gradient-ready order: the buckets PyTorch DDP converges to.
//!
//! DDP's reducer (`torch/csrc/distributed/c10d/reducer.cpp`, read in the PyTorch 2.x version
//! that has the `DDP_SET_LAST_BUCKET_CAP` switch; the rule below is unchanged since 1.8) plans
//! twice. Before iteration 1 it runs `compute_bucket_assignment_by_size` over the parameters in
//! definition order and launches the buckets in reverse. During iteration 1 it records the order
//! in which gradients became ready (`rebuilt_params_`), and once, in `rebuild_buckets`, runs the
//! same assignment over that order; those buckets, already in ready order (it skips the sort by
//! lowest index when given `tensor_indices`), are kept for the rest of training. The assignment:
//! whole parameters, never split, in the given order; a bucket closes as soon as its size
//! reaches its limit (`size >= limit`, so it may overshoot); the first bucket's limit is
//! `first_bucket_bytes` (1 MiB by default), every later one's `bucket_cap_bytes` (25 MiB); what
//! is left at the end is the last bucket. (DDP also keys buckets by dtype and device; here every
//! gradient is `f32` on one device.)
//!
//! A compile-time planner knows the ready order exactly: layers in reverse, and within a layer
//! its parameters in the layer's `READY_ORDER` (the `Layer` contract; observed in PyTorch by
//! `compare/ready_order.py`). So
//! [`plan_buckets`] gives DDP's rebuilt buckets from step 1: the small first bucket holds the
//! first gradients to be ready and is launched first, so communication starts as backward does.
//! DDP's iteration-1 rule stays available as [`BucketOrder::DdpFirstIteration`], for comparison.
//!
//! Buffer layout: a bucket's members lie in the order they were assigned (ready order for the
//! default rule, as DDP lays out its rebuilt buckets; definition order for the iteration-1 rule),
//! each gradient at the running sum of the sizes before it.

use std::borrow::Cow;
use std::fmt;

use crate::limits::BucketLimits;
use crate::schedule::{BucketInfo, LayerInfo, ParamInfo, ParamRef, Schedule};
use crate::spec::{LayerSpec, ParamSpec, ELEM_BYTES};
use crate::wire::WireFormat;

/// The order in which parameters are assigned to buckets, and hence the launch order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BucketOrder {
    /// Gradient-ready order (DDP's rebuilt buckets, from step 2 on): layers in reverse, each
    /// layer's parameters in its ready order; buckets launched in that order.
    #[default]
    Ready,
    /// DDP's first iteration: definition order, buckets launched in reverse, so the small first
    /// bucket (the input layer's) is launched last.
    DdpFirstIteration,
}

/// Why a model cannot be planned. The macro reports these with spans before it gets here;
/// the planner still checks so that it is total on any input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// The model struct has no layer fields.
    NoLayers,
    /// No layer has a parameter, so there is no bucket to fill.
    NoParameters,
    /// A size cap of 0 bytes (`Capped` with `first_bucket_bytes` or `bucket_cap_bytes` 0).
    ZeroLimit,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PlanError::NoLayers => "the model has no layers",
            PlanError::NoParameters => "the model has no parameters, so there is nothing to all-reduce",
            PlanError::ZeroLimit => "bucket size limits must be greater than zero",
        })
    }
}

impl std::error::Error for PlanError {}

/// Plans the buckets of `layers` (given in definition order) in gradient-ready order and returns
/// the complete schedule.
pub fn plan_buckets(model: &str, layers: &[LayerSpec], limits: &BucketLimits) -> Result<Schedule, PlanError> {
    plan_buckets_in(model, layers, limits, BucketOrder::Ready)
}

/// Plans the buckets of `layers` (given in definition order) with `order`'s assignment.
pub fn plan_buckets_in(
    model: &str,
    layers: &[LayerSpec],
    limits: &BucketLimits,
    order: BucketOrder,
) -> Result<Schedule, PlanError> {
    if limits.limit(0) == Some(0) || limits.limit(1) == Some(0) {
        return Err(PlanError::ZeroLimit);
    }
    if layers.is_empty() {
        return Err(PlanError::NoLayers);
    }
    let groups = match order {
        BucketOrder::Ready => assign_by_size(ready_order(layers), limits),
        BucketOrder::DdpFirstIteration => {
            let mut groups = assign_by_size(definition_order(layers), limits);
            groups.reverse();
            groups
        }
    };
    if groups.is_empty() {
        return Err(PlanError::NoParameters);
    }

    let mut placement = vec![Vec::new(); layers.len()];
    for (l, layer) in layers.iter().enumerate() {
        placement[l] = vec![(0, 0); layer.params.len()];
    }
    let buckets: Vec<BucketInfo> = groups
        .into_iter()
        .enumerate()
        .map(|(bucket, members)| {
            let mut numel: usize = 0;
            for r in &members {
                placement[r.layer][r.param] = (bucket, numel);
                // Saturating, as `numel` is: a library caller's absurd sizes are no overflow.
                numel = numel.saturating_add(layers[r.layer].params[r.param].numel());
            }
            // Complete once the earliest layer among its members has run its backward.
            let launch_after = members.iter().map(|r| r.layer).min().expect("groups are non-empty");
            BucketInfo { params: Cow::Owned(members), numel, launch_after, wire: WireFormat::Fp32, low_rank: None }
        })
        .collect();

    // Each layer's first parameter's index in definition order.
    let first_index = layers.iter().scan(0, |next, layer| {
        let first = *next;
        *next += layer.params.len();
        Some(first)
    });
    let layers = layers
        .iter()
        .zip(placement)
        .zip(first_index)
        .map(|((layer, places), first)| LayerInfo {
            name: layer.name.clone(),
            kind: layer.kind.clone(),
            width: layer.width,
            flops_per_sample: layer.flops_per_sample,
            ready: layer.ready,
            tied: layer.tied,
            bucket_boundary: layer.bucket_boundary,
            params: layer
                .params
                .iter()
                .zip(places)
                .enumerate()
                .map(|(j, (p, (bucket, offset)))| ParamInfo {
                    name: p.name.clone(),
                    shape: p.shape.clone(),
                    index: first + j,
                    bucket,
                    offset,
                })
                .collect(),
        })
        .collect();

    Ok(Schedule {
        model: Cow::Owned(model.to_owned()),
        limits: *limits,
        layers: Cow::Owned(layers),
        buckets: Cow::Owned(buckets),
        shard_optimizer: false,
        gathers: Cow::Borrowed(&[]),
    })
}

/// One step of the walk the assignment takes: a parameter and its gradient bytes, or a forced
/// boundary (`#[bucket_boundary]`: a layer and the layer before it never share a bucket).
enum Step {
    Param(ParamRef, usize),
    Boundary,
}

fn param_step(layer: usize, param: usize, p: &ParamSpec) -> Step {
    Step::Param(ParamRef { layer, param }, p.numel().saturating_mul(ELEM_BYTES))
}

/// The order backward produces gradients: the last layer first, each layer's parameters in its
/// `ready` order (as autograd readies `nn.Linear`'s bias before its weight, `nn.LayerNorm`'s
/// weight before its bias). A boundary layer's bucket closes after its own parameters.
fn ready_order(layers: &[LayerSpec]) -> impl Iterator<Item = Step> + '_ {
    layers.iter().enumerate().rev().flat_map(|(layer, spec)| {
        let params =
            spec.ready.indices(spec.params.len()).map(move |param| param_step(layer, param, &spec.params[param]));
        params.chain(spec.bucket_boundary.then_some(Step::Boundary))
    })
}

/// Definition order, as DDP assigns before its first iteration; a boundary layer's bucket opens
/// with its own parameters.
fn definition_order(layers: &[LayerSpec]) -> impl Iterator<Item = Step> + '_ {
    layers.iter().enumerate().flat_map(|(layer, spec)| {
        let params = spec.params.iter().enumerate().map(move |(param, p)| param_step(layer, param, p));
        spec.bucket_boundary.then_some(Step::Boundary).into_iter().chain(params)
    })
}

/// DDP's `compute_bucket_assignment_by_size`: whole parameters in the given order, a bucket
/// closed as soon as it reaches its limit (the first bucket's `first_bucket_bytes`, later ones'
/// `bucket_cap_bytes`, none when unlimited) or at a forced boundary; the rest is the last bucket.
/// Groups come out in the order they closed, members in the order they came.
fn assign_by_size(steps: impl Iterator<Item = Step>, limits: &BucketLimits) -> Vec<Vec<ParamRef>> {
    let mut groups: Vec<Vec<ParamRef>> = Vec::new();
    let mut current: Vec<ParamRef> = Vec::new();
    let mut bytes = 0usize;
    for step in steps {
        let close = match step {
            Step::Boundary => !current.is_empty(),
            Step::Param(r, size) => {
                current.push(r);
                bytes = bytes.saturating_add(size);
                limits.limit(groups.len()).is_some_and(|limit| bytes >= limit)
            }
        };
        if close {
            groups.push(std::mem::take(&mut current));
            bytes = 0;
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

#[cfg(test)]
mod ddp_tests;
#[cfg(test)]
mod tests;
