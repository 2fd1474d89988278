use overlap::prelude::*;
#[path = "support/scale.rs"]
mod scale;
use scale::Scale;

// A width that is no positive integer is one error at the value, not also a missing key.
#[distributed_model]
struct Model {
    fc: Linear<8, 4>,
    #[layer(input = 0, output = 4, params(weight = [4]))]
    scale: Scale,
}

fn main() {}
