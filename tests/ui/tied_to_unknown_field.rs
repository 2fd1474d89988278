use overlap::prelude::*;

#[distributed_model]
pub struct Lm {
    wte: Embedding<65, 32>,
    norm: LayerNorm<32>,
    #[tied(token_embedding)]
    lm_head: TiedHead<32, 65>,
}

// Tied to a block, not to an embedding beside the head: said so.
#[distributed_model]
mod to_a_block {
    use overlap::prelude::*;

    pub struct Embed {
        wte: Embedding<65, 32>,
    }

    pub struct Lm {
        e: Embed,
        norm: LayerNorm<32>,
        #[tied(e)]
        lm_head: TiedHead<32, 65>,
    }
}

fn main() {}
