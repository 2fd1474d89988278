use overlap::prelude::*;

#[distributed_model]
struct Model<L> {
    fc: Linear<4, 2>,
    act: L,
}

fn main() {}
