use overlap::prelude::*;

const N: usize = 3;

// A block whose only use is refused is read anyway: its own problems show in the same compile.
#[distributed_model]
mod counted {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<0, 4>,
        conv: Conv2d,
    }

    pub struct Net {
        input: Linear<4, 4>,
        blocks: [Block; super::N],
    }
}

#[distributed_model]
mod later {
    use overlap::prelude::*;

    pub struct Net {
        input: Linear<4, 4>,
        block: Block,
    }

    pub struct Block {
        conv: Conv2d,
    }
}

fn main() {}
