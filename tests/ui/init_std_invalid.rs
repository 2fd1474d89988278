use overlap::prelude::*;

#[distributed_model]
pub struct Lm {
    #[init(std = 0)]
    wte: Embedding<65, 32>,
    #[init(mean = 0.02)]
    norm: LayerNorm<32>,
    #[init(std = -0.5)]
    head: Linear<32, 65>,
}

fn main() {}
