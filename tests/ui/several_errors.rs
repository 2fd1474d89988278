use overlap::prelude::*;

struct Conv2d;

#[distributed_model(bucket_size_mb = 25)]
struct Model {
    fc1: Linear<0, 4>,
    conv: Conv2d,
    fc2: Linear<4, 2>,
}

fn main() {}
