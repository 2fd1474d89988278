use overlap::prelude::*;

// `#[layer(...)]` on a type that does not implement `overlap::Layer`: one error, at the type.
#[distributed_model]
struct Model {
    fc: Linear<4, 4>,
    #[layer(params(weight = [4]))]
    scale: u32,
}

fn main() {}
