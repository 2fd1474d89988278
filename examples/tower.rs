//! A narrow input feeding a deep tower of wide layers: almost every parameter sits in layers
//! whose backward is followed by more backward, so almost all communication can hide behind
//! compute. The overlap tests and the README's timeline use it.
//!
//! ```text
//! mpirun -n 2 target/release/examples/tower --link latency=5us,bandwidth=1GB/s --timeline step.svg
//! ```

use overlap::prelude::*;

/// 64 inputs, eight 1024-wide layers, 10 classes: 7.4 M parameters. The caps alone would close
/// the first bucket at `fc8` (with `head`: 4.04 MiB, past the 1 MiB first-bucket limit) and keep
/// `fc7` down to `fc1` (24.3 MiB, under 25 MiB) in one bucket, launched after the last backward
/// call. A boundary at every tower layer closes a bucket after each, so each layer (weight and
/// bias, 4 MiB) is reduced right after its backward (DDP gets the same with `bucket_cap_mb = 4`). Only the last two are left exposed: `fc2`'s 4 MiB have just the narrow
/// `fc1`'s short backward to hide behind, and `fc1`'s 260 KiB nothing. (Making `fc1` and `fc2`
/// smaller only moves that to `fc3`'s bucket: at 256 samples and 0.4 GB/s the step was then 0.733
/// of the no-overlap step instead of 0.735.)
#[distributed_model(bucket_cap_mb = 25, first_bucket_mb = 1)]
pub struct Tower {
    fc1: Linear<64, 1024>,
    act1: Relu,
    #[bucket_boundary]
    fc2: Linear<1024, 1024>,
    act2: Relu,
    #[bucket_boundary]
    fc3: Linear<1024, 1024>,
    act3: Relu,
    #[bucket_boundary]
    fc4: Linear<1024, 1024>,
    act4: Relu,
    #[bucket_boundary]
    fc5: Linear<1024, 1024>,
    act5: Relu,
    #[bucket_boundary]
    fc6: Linear<1024, 1024>,
    act6: Relu,
    #[bucket_boundary]
    fc7: Linear<1024, 1024>,
    act7: Relu,
    #[bucket_boundary]
    fc8: Linear<1024, 1024>,
    act8: Relu,
    head: Linear<1024, 10>,
}

fn main() -> std::process::ExitCode {
    overlap_cli::main::<Tower>()
}
