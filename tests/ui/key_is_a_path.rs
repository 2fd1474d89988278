use overlap::prelude::*;

// A key is a plain name: a path is refused as such, with or without a value.
#[distributed_model(a::b, crate::x = 2)]
struct Model {
    fc: Linear<4, 2>,
}

fn main() {}
