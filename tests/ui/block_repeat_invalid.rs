use overlap::prelude::*;

const N: usize = 3;

#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        none: [Block; 0],
        named: [Block; super::N],
        #[layer(input = 4, output = 4)]
        described: Block,
    }
}

fn main() {}
