use overlap::prelude::*;

#[distributed_model(bucket_size_mb = 25)]
struct Model {
    fc: Linear<4, 2>,
}

fn main() {}
