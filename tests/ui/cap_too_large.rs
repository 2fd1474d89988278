use overlap::prelude::*;

// A cap beyond what a `usize` counts in bytes: the message gives the largest.
#[distributed_model(bucket_cap_mb = 1e20)]
struct Model {
    fc: Linear<4, 2>,
}

fn main() {}
