use overlap::prelude::*;

// An Embedding reads one token id per row: after a layer of another width, it is told to come first.
#[distributed_model]
pub struct Lm {
    fc: Linear<4, 4>,
    wte: Embedding<4, 8>,
    head: Linear<8, 4>,
}

fn main() {}
