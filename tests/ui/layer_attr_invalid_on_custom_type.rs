use overlap::prelude::*;

pub struct Conv2d;

#[distributed_model]
struct Model {
    #[layer(stride = 1)]
    conv: Conv2d,
    fc: Linear<4, 2>,
}

fn main() {}
