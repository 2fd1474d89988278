use overlap::prelude::*;

// An Embedding reads the batch's token ids: after a layer of width 1, whose outputs are no token
// ids, or after element-wise layers only, it is told to come first too.
#[distributed_model]
pub struct Lm {
    fc: Linear<4, 1>,
    wte: Embedding<10, 8>,
    head: Linear<8, 10>,
}

#[distributed_model]
pub struct Gated {
    act: Relu,
    wte: Embedding<10, 8>,
    head: Linear<8, 10>,
}

fn main() {}
