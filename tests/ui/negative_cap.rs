use overlap::prelude::*;

#[distributed_model(first_bucket_mb = -1)]
struct Model {
    fc: Linear<4, 2>,
}

fn main() {}
