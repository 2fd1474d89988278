use overlap::prelude::*;

#[distributed_model]
pub struct Lm {
    wte: Embedding<60, 32>,
    norm: LayerNorm<32>,
    #[tied(norm)]
    lm_head: TiedHead<32, 65>,
    #[tied(wte)]
    other_head: TiedHead<65, 65>,
}

fn main() {}
