use overlap::prelude::*;

#[distributed_model]
struct Model {
    fc: Linear<0, 10>,
}

fn main() {}
