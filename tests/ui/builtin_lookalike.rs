use overlap::prelude::*;

mod nn {
    pub struct Relu;
}

// A type named as a built-in layer, reached through a path, that is no layer: one error, at the
// type.
#[distributed_model]
pub struct Model {
    fc: Linear<4, 2>,
    act: nn::Relu,
}

fn main() {}
