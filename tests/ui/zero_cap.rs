use overlap::prelude::*;

#[distributed_model(bucket_cap_mb = 0)]
struct Model {
    fc: Linear<4, 2>,
}

fn main() {}
