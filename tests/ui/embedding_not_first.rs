use overlap::prelude::*;

// An Embedding reads token ids, so nothing comes before it.
#[distributed_model]
pub struct Lm {
    fc: Linear<4, 4>,
    wte: Embedding<4, 8>,
    head: Linear<8, 4>,
}

fn main() {}
