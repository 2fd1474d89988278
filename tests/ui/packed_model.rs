use overlap::prelude::*;

// `#[repr(packed)]` on a model and on a block: one error each, at the attribute.
#[distributed_model]
#[repr(packed)]
pub struct Packed {
    fc: Linear<4, 4>,
    head: Linear<4, 2>,
}

#[distributed_model]
mod net {
    use overlap::prelude::*;

    #[repr(C, packed(2))]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
        head: Linear<4, 2>,
    }
}

fn main() {}
