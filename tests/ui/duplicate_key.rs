use overlap::prelude::*;

#[distributed_model(bucket_cap_mb = 25, bucket_cap_mb = 8)]
struct Model {
    fc: Linear<4, 2>,
}

fn main() {}
