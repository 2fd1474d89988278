use overlap::prelude::*;

#[distributed_model]
pub struct Lm {
    wte: Embedding<65, 10>,
    attn: CausalSelfAttention<10, 4>,
    head: Linear<10, 65>,
}

fn main() {}
