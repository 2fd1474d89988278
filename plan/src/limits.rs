//! Where buckets close, besides `#[bucket_boundary]` layers: at PyTorch DDP's size caps, or
//! nowhere else (the cost-model planner marks the boundaries it chooses, besides the forced ones).

use crate::spec::MIB;

/// PyTorch DDP's `bucket_cap_mb` default.
pub const DEFAULT_BUCKET_CAP_MB: usize = 25;
/// PyTorch DDP's first-bucket size (`dist._DEFAULT_FIRST_BUCKET_BYTES`).
pub const DEFAULT_FIRST_BUCKET_MB: usize = 1;

/// The size limits buckets are planned with, kept in the schedule for its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BucketLimits {
    /// DDP's rule: a bucket closes once it holds at least its limit, in bytes:
    /// `first_bucket_bytes` for the first bucket, `bucket_cap_bytes` for every later one.
    Capped {
        /// The first bucket's limit, in bytes (DDP's `first_bucket_bytes`).
        first_bucket_bytes: usize,
        /// Every later bucket's limit, in bytes (DDP's `bucket_cap_mb`, in bytes).
        bucket_cap_bytes: usize,
    },
    /// No size caps: buckets end only at `bucket_boundary` layers.
    Unlimited,
}

impl BucketLimits {
    /// The byte size at which the bucket after `closed` closed ones closes; `None` when only a
    /// boundary closes it.
    pub fn limit(&self, closed: usize) -> Option<usize> {
        match *self {
            BucketLimits::Capped { first_bucket_bytes, .. } if closed == 0 => Some(first_bucket_bytes),
            BucketLimits::Capped { bucket_cap_bytes, .. } => Some(bucket_cap_bytes),
            BucketLimits::Unlimited => None,
        }
    }
}

impl Default for BucketLimits {
    /// DDP's defaults: 1 MiB for the first bucket, 25 MiB for the others.
    fn default() -> Self {
        BucketLimits::Capped {
            first_bucket_bytes: DEFAULT_FIRST_BUCKET_MB * MIB,
            bucket_cap_bytes: DEFAULT_BUCKET_CAP_MB * MIB,
        }
    }
}
