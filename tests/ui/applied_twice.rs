//! The attribute applied twice is one error at the second, not a dozen clashing definitions.
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

fn main() {}
