//! The `uneven` model with PyTorch DDP's bucket caps, to compare against its profile-guided
//! plan (`examples/uneven.rs`):
//!
//! ```text
//! mpirun -n 2 target/release/examples/uneven_ddp --batch 256 --link bandwidth=0.3GB/s
//! mpirun -n 2 target/release/examples/uneven     --batch 256 --link bandwidth=0.3GB/s
//! ```

use overlap::prelude::*;

/// A wide first layer, then narrow deep layers. DDP's caps, in gradient-ready order: the 1 MiB
/// first bucket closes once `fc6.weight` is in (with `head`), launched after `fc6`'s backward;
/// everything else, `fc5` down to `embed` (9.1 MiB), stays under 25 MiB and is one bucket that
/// can only be reduced once the whole backward is done. The profile-guided plan splits it.
#[distributed_model(bucket_cap_mb = 25, first_bucket_mb = 1)]
pub struct UnevenDdp {
    embed: Linear<784, 1024>,
    act0: Relu,
    fc1: Linear<1024, 512>,
    act1: Relu,
    fc2: Linear<512, 512>,
    act2: Relu,
    fc3: Linear<512, 512>,
    act3: Relu,
    fc4: Linear<512, 512>,
    act4: Relu,
    fc5: Linear<512, 512>,
    act5: Relu,
    fc6: Linear<512, 512>,
    act6: Relu,
    head: Linear<512, 10>,
}

fn main() -> std::process::ExitCode {
    overlap_cli::main::<UnevenDdp>()
}
