//! The `uneven` model (a wide first layer, narrow deep layers) with buckets chosen from a
//! measured profile instead of size caps. The profile was written on a 2-core machine by
//!
//! ```text
//! mpirun -n 2 target/release/examples/uneven_ddp --steps 20 --batch 256 \
//!     --link bandwidth=0.5GB/s --write-profile examples/profiles/uneven.json
//! ```
//!
//! so the plan is the one that minimises the simulated step on 2 ranks over that link (cargo
//! recompiles this example when the file changes). Compare with `uneven_ddp`:
//!
//! ```text
//! mpirun -n 2 target/release/examples/uneven --batch 256 --link bandwidth=0.5GB/s
//! ```

use overlap::prelude::*;

/// The same layers as `UnevenDdp` in `uneven_ddp.rs`; the profile's layer names are checked against them.
#[distributed_model(buckets = profile("examples/profiles/uneven.json"))]
pub struct Uneven {
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
    overlap_cli::main::<Uneven>()
}
