use overlap::prelude::*;

#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
        again: Block,
    }

    pub struct Net {
        block: Block,
    }
}

fn main() {}
