use overlap::prelude::*;

// One module holds one model: every struct but one must be used by another.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
    }

    pub struct Other {
        fc: Linear<4, 4>,
    }
}

fn main() {}
