use overlap::prelude::*;
#[path = "support/scale.rs"]
mod scale;
use scale::Scale;

#[distributed_model]
struct Model {
    fc: Linear<8, 4>,
    // The type names its parameter `weight`; the attribute calls it `gain`, which checkpoints would use.
    #[layer(params(gain = [4]))]
    scale: Scale,
}

fn main() {}
