//! Reverse-order gradient buckets with PyTorch DDP's semantics.
//!
//! DDP (`_compute_bucket_assignment_by_size`) assigns whole parameters, never split, greedily in
//! definition order, and closes a bucket as soon as its size reaches the limit, so a bucket may
//! overshoot it. The first bucket (the first-defined parameters) closes at `first_bucket_bytes`
//! (1 MiB by default), every later one at `bucket_cap_bytes` (25 MiB). Buckets are then launched
//! in reverse: backward produces the output layer's gradients first, so that bucket is reduced
//! first, and the small first bucket is reduced last, leaving little exposed after backward.

use std::borrow::Cow;
use std::fmt;

use crate::schedule::{BucketInfo, LayerInfo, ParamInfo, ParamRef, Schedule};
use crate::spec::{LayerSpec, ELEM_BYTES, MIB};

/// PyTorch DDP's `bucket_cap_mb` default.
pub const DEFAULT_BUCKET_CAP_MB: usize = 25;
/// PyTorch DDP's first-bucket size (`dist._DEFAULT_FIRST_BUCKET_BYTES`).
pub const DEFAULT_FIRST_BUCKET_MB: usize = 1;

/// Bucket size limits, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketConfig {
    pub first_bucket_bytes: usize,
    pub bucket_cap_bytes: usize,
}

impl BucketConfig {
    /// No size caps: buckets end only at `bucket_boundary` layers (the cost-model planner sets
    /// those itself).
    pub const UNLIMITED: BucketConfig = BucketConfig { first_bucket_bytes: usize::MAX, bucket_cap_bytes: usize::MAX };
}

impl Default for BucketConfig {
    fn default() -> Self {
        BucketConfig {
            first_bucket_bytes: DEFAULT_FIRST_BUCKET_MB * MIB,
            bucket_cap_bytes: DEFAULT_BUCKET_CAP_MB * MIB,
        }
    }
}

/// Why a model cannot be planned. The macro reports these with spans before it gets here;
/// the planner still checks so that it is total on any input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    NoLayers,
    NoParameters,
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

/// Plans the buckets of `layers` (in definition order) and returns the complete schedule.
pub fn plan_buckets(model: &str, layers: &[LayerSpec], config: &BucketConfig) -> Result<Schedule, PlanError> {
    if config.first_bucket_bytes == 0 || config.bucket_cap_bytes == 0 {
        return Err(PlanError::ZeroLimit);
    }
    if layers.is_empty() {
        return Err(PlanError::NoLayers);
    }
    let groups = assign_in_definition_order(layers, config);
    if groups.is_empty() {
        return Err(PlanError::NoParameters);
    }

    let mut placement = vec![Vec::new(); layers.len()];
    for (l, layer) in layers.iter().enumerate() {
        placement[l] = vec![(0, 0); layer.params.len()];
    }
    let buckets: Vec<BucketInfo> = groups
        .into_iter()
        .rev()
        .enumerate()
        .map(|(bucket, members)| {
            let mut numel = 0;
            for r in &members {
                placement[r.layer][r.param] = (bucket, numel);
                numel += layers[r.layer].params[r.param].numel();
            }
            let launch_after = members.iter().map(|r| r.layer).min().expect("groups are non-empty");
            BucketInfo { params: Cow::Owned(members), numel, launch_after }
        })
        .collect();

    let layers = layers
        .iter()
        .zip(placement)
        .map(|(layer, places)| LayerInfo {
            name: layer.name.clone(),
            kind: layer.kind.clone(),
            width: layer.width,
            flops_per_sample: layer.flops_per_sample,
            params: layer
                .params
                .iter()
                .zip(places)
                .map(|(p, (bucket, offset))| ParamInfo { name: p.name.clone(), shape: p.shape.clone(), bucket, offset })
                .collect(),
        })
        .collect();

    Ok(Schedule {
        model: Cow::Owned(model.to_owned()),
        first_bucket_bytes: config.first_bucket_bytes,
        bucket_cap_bytes: config.bucket_cap_bytes,
        layers: Cow::Owned(layers),
        buckets: Cow::Owned(buckets),
    })
}

/// DDP's greedy pass: groups of parameters in definition order, each closed once it reaches its
/// limit (or at a forced boundary).
fn assign_in_definition_order(layers: &[LayerSpec], config: &BucketConfig) -> Vec<Vec<ParamRef>> {
    let mut groups: Vec<Vec<ParamRef>> = Vec::new();
    let mut current: Vec<ParamRef> = Vec::new();
    let mut bytes = 0usize;
    for (layer, spec) in layers.iter().enumerate() {
        if spec.bucket_boundary && !current.is_empty() {
            groups.push(std::mem::take(&mut current));
            bytes = 0;
        }
        for (param, p) in spec.params.iter().enumerate() {
            current.push(ParamRef { layer, param });
            bytes = bytes.saturating_add(p.numel().saturating_mul(ELEM_BYTES));
            let limit = if groups.is_empty() { config.first_bucket_bytes } else { config.bucket_cap_bytes };
            if bytes >= limit {
                groups.push(std::mem::take(&mut current));
                bytes = 0;
            }
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

#[cfg(test)]
mod tests;
