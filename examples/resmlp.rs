//! A ResNet-style MLP: an input projection, eight residual blocks (LayerNorm → Linear → GELU →
//! Linear, added to the block's input), a head. The model and its block are written in one
//! module, which `#[distributed_model]` reads whole: the block is unrolled eight times, each
//! copy's parameters named by their path (`blocks.3.fc1.weight`, as PyTorch's `nn.ModuleList`
//! names them), and `#[bucket_boundary]` on `blocks` starts a bucket at every copy, so that no
//! bucket spans two blocks (the head, whose gradients are ready first, shares the last block's)
//! and an all-reduce starts as backward finishes each block.
//!
//! ```text
//! mpirun -n 2 target/release/examples/resmlp --steps 50
//! target/release/examples/resmlp --print-schedule
//! ```

use overlap::prelude::*;

#[distributed_model(bucket_cap_mb = 25, first_bucket_mb = 1)]
pub mod resmlp {
    use overlap::prelude::*;

    /// `y = x + fc2(gelu(fc1(norm(x))))`.
    #[residual]
    pub struct ResBlock {
        norm: LayerNorm<256>,
        fc1: Linear<256, 1024>,
        act: Gelu,
        fc2: Linear<1024, 256>,
    }

    pub struct ResMlp {
        input: Linear<784, 256>,
        #[bucket_boundary]
        blocks: [ResBlock; 8],
        head: Linear<256, 10>,
    }
}

fn main() -> std::process::ExitCode {
    overlap_cli::main::<resmlp::ResMlp>()
}
