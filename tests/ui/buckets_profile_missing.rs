use overlap::prelude::*;

// The profile must exist (paths are relative to the crate's Cargo.toml).
#[distributed_model(buckets = profile("tests/ui/no-such-profile.json"))]
struct Model {
    fc: Linear<8, 4>,
}

fn main() {}
