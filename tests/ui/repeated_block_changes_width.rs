use overlap::prelude::*;

// A repeated block that changes the width cannot follow itself: one error at its layer, not one
// per copy.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 8>,
    }

    pub struct Net {
        blocks: [Block; 3],
        head: Linear<8, 2>,
    }
}

fn main() {}
