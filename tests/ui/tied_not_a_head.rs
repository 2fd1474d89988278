use overlap::prelude::*;

#[distributed_model]
pub struct Lm {
    wte: Embedding<65, 32>,
    norm: LayerNorm<32>,
    #[tied(wte)]
    lm_head: Linear<32, 65>,
}

fn main() {}
