use overlap::prelude::*;

struct Conv2d;

#[distributed_model]
struct Model {
    fc: Linear<4, 4>,
    conv: Conv2d,
}

fn main() {}
