//! `mlp`'s model with PowerSGD (rank 4): each weight matrix's gradient travels as two thin
//! factors, about 170x fewer bytes than FP32, with error feedback. Compare the two on a slow link:
//!
//! ```text
//! mpirun -n 2 target/release/examples/mlp         --link latency=30us,bandwidth=0.25GB/s
//! mpirun -n 2 target/release/examples/mlp_powersgd --link latency=30us,bandwidth=0.25GB/s
//! target/release/examples/mlp_powersgd --print-schedule   # the factors' bytes per bucket
//! ```

use overlap::prelude::*;

/// The layers and buckets of `mlp`; the first 10 steps are sent whole (`start_iter`).
#[distributed_model(bucket_cap_mb = 8, first_bucket_mb = 1, grad_comm = powersgd(rank = 4))]
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
