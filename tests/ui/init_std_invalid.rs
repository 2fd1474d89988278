use overlap::prelude::*;

#[distributed_model]
pub struct Lm {
    #[init(std = 0)]
    wte: Embedding<65, 32>,
    #[init(mean = 0.02)]
    norm: LayerNorm<32>,
    #[init(std = -0.5)]
    head: Linear<32, 65>,
    // 0 once rounded to the f32 the weights are drawn with.
    #[init(std = 1e-50)]
    out: Linear<65, 65>,
    // Beyond the largest standard deviation accepted.
    #[init(std = 1e7)]
    last: Linear<65, 65>,
}

fn main() {}
