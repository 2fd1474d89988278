//! The model of the README, without its optional `#[bucket_boundary]` (so `head` shares a bucket
//! with `fc3`), trained on a synthetic classification set.
//!
//! ```text
//! cargo run --release --example mlp                      # one process
//! mpirun -n 2 target/release/examples/mlp                # two data-parallel ranks
//! target/release/examples/mlp --print-schedule           # the compiled bucket plan
//! ```

use overlap::prelude::*;

/// 784-2048-2048-2048-10 with ReLU: about 10 M parameters. Filled in the order backward produces
/// gradients, an 8 MiB cap gives a bucket per wide layer: `head` and `fc3` (the 1 MiB first
/// bucket closes once `fc3.weight` is in, at 16.09 MiB), `fc2`, then `fc1`. The first two
/// all-reduces overlap the backward of earlier layers; only `fc1`'s 6.1 MiB start after it.
#[distributed_model(bucket_cap_mb = 8, first_bucket_mb = 1)]
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
