use overlap::prelude::*;

// An Embedding reads the batch's token ids: after a built-in layer of width 1, or element-wise
// ones, whose outputs are no token ids, it is told to come first too. (After a layer of one's own,
// which may output ids, it is accepted: `tests/cuda/main.rs`.)
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
