use overlap::prelude::*;

// `blocks_0_fc` and `blocks.0.fc` would share their workspace entries.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        blocks_0_fc: Linear<4, 4>,
        blocks: [Block; 1],
    }
}

fn main() {}
