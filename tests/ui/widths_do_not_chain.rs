use overlap::prelude::*;

#[distributed_model]
struct Model {
    fc1: Linear<784, 512>,
    act: Relu,
    fc2: Linear<256, 10>,
}

fn main() {}
