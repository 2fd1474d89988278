use overlap::prelude::*;

// A const parameter used as a width: the struct's one error covers it.
#[distributed_model]
struct M<const N: usize> {
    fc: Linear<N, 2>,
    norm: LayerNorm<{ N }>,
}

// The same in a module's model.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net<const D: usize> {
        block: Block,
        head: Linear<4, D>,
    }
}

fn main() {}
