use overlap::prelude::*;
#[path = "support/scale.rs"]
mod scale;
use scale::Scale;

#[distributed_model]
struct Model {
    fc: Linear<8, 4>,
    // The type says `weight` is `[4]`; the attribute says `[8]`.
    #[layer(params(weight = [8]))]
    scale: Scale,
}

fn main() {}
