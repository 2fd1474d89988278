use overlap::prelude::*;

// Blocks come above the structs that use them, so that nesting cannot form a cycle.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Net {
        first: Block,
    }

    pub struct Block {
        fc: Linear<4, 4>,
    }
}

fn main() {}
