use overlap::prelude::*;

// A problem in a repeated block is one error at its tokens, naming the first copy, not one per
// copy: a head tied to a layer of another kind, a tie to no layer, a tensor too large, and a
// residual block of two widths inside a repeated block.
#[distributed_model]
mod tied {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
        #[tied(fc)]
        head: TiedHead<4, 4>,
        #[tied(wte)]
        other: TiedHead<4, 4>,
    }

    pub struct Net {
        blocks: [Block; 3],
    }
}

#[distributed_model]
mod sizes {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<100000, 100000>,
    }

    pub struct Net {
        blocks: [Block; 3],
    }
}

#[distributed_model]
mod residual {
    use overlap::prelude::*;

    #[residual]
    pub struct Widen {
        fc: Linear<4, 8>,
    }

    pub struct Outer {
        w: Widen,
        down: Linear<8, 4>,
    }

    pub struct Net {
        o: [Outer; 3],
    }
}

// A residual block of one width after a layer of another: the chain's error alone, not also one
// about the block's widths.
#[distributed_model]
mod after_a_chain_error {
    use overlap::prelude::*;

    #[residual]
    pub struct Keep {
        fc: Linear<4, 8>,
        back: Linear<8, 4>,
    }

    pub struct Net {
        input: Linear<4, 6>,
        w: Keep,
    }
}

fn main() {}
