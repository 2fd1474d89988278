use overlap::prelude::*;

// Two fields of one block, each after a layer of another width than the block takes: one error
// per field that uses it (both at the block's layer, naming the use), in the same compile. The
// copies of a repeated block share their field: copies 1 and 2 of `narrowing`, each after one
// that outputs width 6, are one error.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<8, 8>,
    }

    pub struct Narrowing {
        fc: Linear<8, 6>,
    }

    pub struct Net {
        a: Linear<4, 6>,
        first: Block,
        b: Linear<8, 5>,
        second: Block,
        c: Linear<8, 3>,
        repeated: [Block; 3],
        narrowing: [Narrowing; 3],
        head: Linear<6, 2>,
    }
}

fn main() {}
