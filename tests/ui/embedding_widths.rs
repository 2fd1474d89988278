use overlap::prelude::*;

#[distributed_model]
pub struct Lm {
    wte: Embedding<65>,
    wpe: PositionEmbedding<64, 128, 3>,
    head: Linear<128, 65>,
}

fn main() {}
