// A type of the module's own (not a struct, which would be a block) named like a built-in layer
// hides overlap's: the field is told so, once however many copies of its block, and the compiler
// adds nothing.
#[overlap::distributed_model]
mod net {
    use overlap::prelude::*;

    pub enum Relu {
        Plain,
    }

    pub type LayerNorm<const D: usize> = Linear<D, D>;

    // An alias of the built-in itself hides nothing.
    pub type Gelu = overlap::prelude::Gelu;

    pub struct Block {
        norm: LayerNorm<4>,
        fc: Linear<4, 4>,
        act: Relu,
        smooth: Gelu,
    }

    pub struct Net {
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

fn main() {}
