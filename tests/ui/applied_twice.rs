//! The attribute applied twice (or again inside a module it reads) is one error at the second,
//! not a dozen clashing definitions.
use overlap::prelude::*;

#[distributed_model]
#[distributed_model(bucket_cap_mb = 1)]
pub struct Net {
    fc1: Linear<4, 4>,
    fc2: Linear<4, 2>,
}

#[distributed_model]
#[overlap::distributed_model]
mod stacked {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Model {
        blocks: [Block; 2],
    }
}

// On a struct of a module the attribute reads: one error at each inner attribute, which is
// removed (the block stays a block of the model, not a model of its own).
#[distributed_model]
mod inside {
    use overlap::prelude::*;

    #[distributed_model(bucket_cap_mb = 1)]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    #[distributed_model]
    pub struct Model {
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

fn main() {}
