use overlap::prelude::*;

// An `#[init(std = ..)]` with no parameter to decide: on a layer without parameters, on a head
// that reads its embedding's, and on a block whose every layer has an `#[init]` of its own.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        #[init(std = 0.1)]
        fc: Linear<4, 4>,
    }

    pub struct Net {
        wte: Embedding<10, 4>,
        #[init(std = 0.02)]
        act: Relu,
        #[init(std = 0.02)]
        block: Block,
        #[init(std = 0.02)]
        #[tied(wte)]
        lm_head: TiedHead<4, 10>,
    }
}

fn main() {}
