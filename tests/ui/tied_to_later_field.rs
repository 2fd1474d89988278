use overlap::prelude::*;

#[distributed_model]
pub mod lm {
    use overlap::prelude::*;

    pub struct Lm {
        norm: LayerNorm<32>,
        #[tied(out)]
        lm_head: TiedHead<32, 32>,
        out: Embedding<32, 32>,
    }
}

fn main() {}
