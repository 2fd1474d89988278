use overlap::prelude::*;

// A head written with its path is still a head: it needs `#[tied(..)]`.
#[distributed_model]
pub struct Untied {
    wte: Embedding<65, 32>,
    lm_head: overlap::TiedHead<32, 65>,
}

// Tied to a malformed embedding: that embedding's error only.
#[distributed_model]
pub struct ToMalformed {
    wte: Embedding<65, 0>,
    #[tied(wte)]
    lm_head: TiedHead<32, 65>,
}

fn main() {}
