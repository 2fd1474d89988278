//! Bucket planning for `overlap`, shared by the `#[distributed_model]` macro (at compile time) and
//! the runtime (printing, fingerprints, simulation).
//!
//! Pure (no I/O) on purpose: the macro links it into the compiler, so the plan a model runs with
//! is exactly the plan this crate computes, with no second implementation. Its one dependency,
//! serde, reads and writes the profile file, which the runtime writes and the macro reads.

#![warn(missing_docs)]

mod auto;
mod auto_sharded;
mod bucket;
mod gather;
mod gather_group;
mod grad_slots;
mod limits;
mod link;
mod low_rank;
mod profile;
mod schedule;
mod schedule_table;
mod shard;
mod simulate;
mod spec;
mod wire;

pub use auto::{plan_auto, Strategy, Target, EXHAUSTIVE_LAYERS};
pub use auto_sharded::{plan_auto_sharded, sharded_step};
pub use bucket::{plan_buckets, plan_buckets_in, BucketOrder, PlanError};
pub use gather::{choose_gathers, gathers_per_bucket, gathers_per_layer, GatherGroup};
pub use grad_slots::assign_grad_slots;
pub use limits::{BucketLimits, DEFAULT_BUCKET_CAP_MB, DEFAULT_FIRST_BUCKET_MB};
pub use link::{Link, LinkPreset, LINK_PRESETS};
pub use low_rank::LowRank;
pub use profile::{LayerTimes, Profile, PROFILE_FORMAT};
pub use schedule::{BucketInfo, Fnv, LayerInfo, ParamInfo, ParamRef, Schedule};
pub use schedule_table::human_bytes;
pub use shard::{owned_part, round_piece, shard_of, shard_within};
pub use simulate::{
    sim_buckets, simulate, simulate_sharded, BucketTimes, Prediction, SimBucket, SimLowRank, SimSharding, StepCosts,
    DEFAULT_UPDATE_S_PER_BYTE, LOW_RANK_S_PER_BYTE, MAX_WORLD, NARROWING_S_PER_BYTE,
};
pub use spec::{LayerSpec, ParamSpec, ReadyOrder, StdInit, Width, ELEM_BYTES, MAX_TENSOR_NUMEL, MIB};
pub use wire::{GradComm, WireFormat};
