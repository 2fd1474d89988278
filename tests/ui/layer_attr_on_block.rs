//! `#[layer(..)]` on the one field that uses a block: the block is still a block (it holds
//! layers and implements no `Layer`), and the attribute is reported as such.
use overlap::prelude::*;

#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
        act: Relu,
    }

    pub struct Net {
        #[layer(input = 4, output = 4)]
        block: Block,
        head: Linear<4, 4>,
    }
}

fn main() {}
