use overlap::prelude::*;

#[distributed_model]
struct Model<const N: usize> {
    fc: Linear<4, 2>,
}

fn main() {}
