#[path = "support/scale.rs"]
mod scale;

use overlap::prelude::*;

// A block's `std` draws the matrices of overlap's layers and leaves layers of one's own to their
// `Layer::init`: over a block of such layers alone it changes nothing, and is refused, saying
// how to name a parameter or where the `#[init]` would apply.
#[distributed_model]
mod own_layers {
    use overlap::prelude::*;

    pub struct Block {
        #[layer(params(weight = [4, 4]))]
        scale: super::scale::Scale,
    }

    pub struct Net {
        fc: Linear<4, 4>,
        #[init(std = 0.02)]
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

// With a suffix that draws one of their parameters, the `std` beside it still changes nothing.
#[distributed_model]
mod with_a_suffix {
    use overlap::prelude::*;

    pub struct Block {
        #[layer(params(weight = [4, 4]))]
        scale: super::scale::Scale,
    }

    pub struct Net {
        fc: Linear<4, 4>,
        #[init(std = 0.02, ends_with("scale.weight", std = 0.5))]
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

fn main() {}
