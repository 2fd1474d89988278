//! Bucket planning for `overlap`, shared by the `#[distributed_model]` macro (at compile time) and
//! the runtime (printing, fingerprints, simulation).
//!
//! Pure and dependency-free on purpose: the macro links it into the compiler, so the plan a
//! model runs with is exactly the plan this crate computes, with no second implementation.

mod auto;
mod bucket;
mod link;
mod schedule;
mod simulate;
mod spec;

pub use auto::{plan_auto, Strategy, Target, EXHAUSTIVE_LAYERS};
pub use bucket::{
    plan_buckets, plan_buckets_in, BucketConfig, BucketOrder, PlanError, DEFAULT_BUCKET_CAP_MB, DEFAULT_FIRST_BUCKET_MB,
};
pub use link::{Link, LinkPreset, LINK_PRESETS};
pub use schedule::{human_bytes, BucketInfo, LayerInfo, ParamInfo, ParamRef, Schedule};
pub use simulate::{sim_buckets, simulate, BucketTimes, Prediction, SimBucket, StepCosts, DEFAULT_UPDATE_S_PER_BYTE};
pub use spec::{LayerSpec, ParamSpec, Width, ELEM_BYTES, MAX_TENSOR_NUMEL, MIB};
