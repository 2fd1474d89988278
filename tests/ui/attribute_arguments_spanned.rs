use overlap::prelude::*;
#[path = "support/scale.rs"]
mod scale;
use scale::Scale;

// Each error points at the arguments at fault, not at the whole attribute: `#[residual]`'s
// arguments, and a `#[layer]` width given without its other half.
#[distributed_model]
mod net {
    use super::Scale;
    use overlap::prelude::*;

    #[residual(always)]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    #[residual = true]
    pub struct Other {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
        other: Other,
        #[layer(input = 4, params(weight = [4]))]
        scale: Scale,
        head: Linear<4, 2>,
    }
}

fn main() {}
