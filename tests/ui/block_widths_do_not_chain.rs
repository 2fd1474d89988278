use overlap::prelude::*;

#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<8, 8>,
    }

    pub struct Net {
        input: Linear<4, 6>,
        blocks: [Block; 2],
    }
}

fn main() {}
