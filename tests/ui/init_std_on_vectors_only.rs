#[path = "support/scale.rs"]
mod scale;

use overlap::prelude::*;

// `std` draws matrices and zeroes biases: a layer whose only parameter is a vector of another
// name would keep its values, so the `#[init]` is refused, saying how to name the parameter.
#[distributed_model]
pub struct Net {
    fc: Linear<4, 4>,
    #[init(std = 0.02)]
    #[layer(params(weight = [4]))]
    scale: scale::Scale,
    head: Linear<4, 2>,
}

// In a repeated block: one error for every copy.
#[distributed_model]
mod repeated {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
        #[init(std = 0.02)]
        #[layer(params(weight = [4]))]
        scale: super::scale::Scale,
    }

    pub struct Net {
        blocks: [Block; 3],
        head: Linear<4, 2>,
    }
}

fn main() {}
