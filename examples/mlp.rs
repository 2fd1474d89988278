//! The model of the README, trained on a synthetic classification set.
//!
//! ```text
//! cargo run --release --example mlp                      # one process
//! mpirun -n 2 target/release/examples/mlp                # two data-parallel ranks
//! target/release/examples/mlp --print-schedule           # the compiled bucket plan
//! ```

use overlap::prelude::*;

/// 784-2048-2048-2048-10 with ReLU: about 10 M parameters. An 8 MiB cap gives four buckets, so
/// three all-reduces overlap the backward of earlier layers.
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
