use overlap::prelude::*;

#[distributed_model]
struct Model {
    fc: Linear<4, 2>,
    #[layer(input = 2, output = 2, stride = 1)]
    custom: Relu,
}

fn main() {}
