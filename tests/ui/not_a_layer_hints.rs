use overlap::prelude::*;

mod elsewhere {
    pub struct Block;
}

// An array of layers, a struct from elsewhere and an alias are none of a layer and a block:
// each error says what would be.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub type Alias = Linear<4, 4>;

    pub struct Net {
        twice: [Linear<4, 4>; 2],
        far: crate::elsewhere::Block,
        aliased: Alias,
        head: Linear<4, 2>,
    }
}

fn main() {}
