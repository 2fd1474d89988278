//! `mlp`'s model with its optimizer state sharded over the ranks (ZeRO-1): each bucket is
//! reduce-scattered during backward, each rank updates its own 1/N slice with state for that
//! slice alone, and the updated slices are all-gathered during the next forward, each waited for
//! right before the first layer that reads it. The parameters are those of `mlp`, bit for bit;
//! AdamW's state per rank is 1/N of it.
//!
//! ```text
//! mpirun -n 4 target/release/examples/mlp_zero --optimizer adamw   # state: a quarter per rank
//! mpirun -n 2 target/release/examples/mlp_zero --link latency=5us,bandwidth=1GB/s
//! cargo expand --example mlp_zero                                 # the all-gathers' launches and waits
//! ```

use overlap::prelude::*;

/// The layers and buckets of `mlp`; `shard_optimizer` places the all-gathers in forward.
#[distributed_model(shard_optimizer, bucket_cap_mb = 8, first_bucket_mb = 1)]
pub struct Mlp {
    fc1: Linear<784, 2048>,
    act1: Relu,
    fc2: Linear<2048, 2048>,
    act2: Relu,
    fc3: Linear<2048, 2048>,
    act3: Relu,
    head: Linear<2048, 10>,
}

fn main() -> std::process::ExitCode {
    overlap_cli::main::<Mlp>()
}
