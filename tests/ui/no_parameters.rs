use overlap::prelude::*;

#[distributed_model]
struct Model {
    act1: Relu,
    act2: Relu,
}

fn main() {}
