//! The sharding keys of `#[distributed_model(...)]`: `shard_optimizer` (a flag, or `= true |
//! false`), whether the optimizer state is sharded by default; `gathers = per_bucket |
//! per_layer`, how the all-gathers of the updated shards are grouped (by default one per bucket,
//! or the cost model's choice when it chose the buckets: `buckets = auto(..)` or `profile(..)`).

use syn::{Expr, ExprLit, Lit};

use crate::errors::Errors;
use crate::helpers::expr_name;

/// `gathers = ...`: the all-gathers' grouping, given by hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gathers {
    /// One all-gather per bucket.
    PerBucket,
    /// One per layer of each bucket, waited for right before that layer (`gathers_per_layer`).
    PerLayer,
}

pub const SHARD_HELP: &str = "`shard_optimizer` is a flag: write `shard_optimizer` (or `shard_optimizer = true`) to \
                              shard the optimizer state over the ranks, `shard_optimizer = false` (the default) to \
                              keep it whole";

/// `true` or `false`.
pub fn shard_value(value: &Expr, errors: &mut Errors) -> Option<bool> {
    match value {
        Expr::Lit(ExprLit { lit: Lit::Bool(b), .. }) => Some(b.value),
        other => {
            errors.spanned(other, SHARD_HELP);
            None
        }
    }
}

/// `per_bucket` or `per_layer`.
pub fn gathers_value(value: &Expr, errors: &mut Errors) -> Option<Gathers> {
    match expr_name(value).as_str() {
        "per_bucket" => Some(Gathers::PerBucket),
        "per_layer" => Some(Gathers::PerLayer),
        _ => {
            errors.spanned(
                value,
                "`gathers` must be `per_bucket` (one all-gather per bucket, the default) or `per_layer` (one per \
                 layer, each waited for right before that layer's forward)",
            );
            None
        }
    }
}
