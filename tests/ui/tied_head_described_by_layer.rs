use overlap::prelude::*;

// A `TiedHead` reads the weight a tie hands it: `#[layer(..)]` would make it a layer of one's
// own, with none. One error each, at the type.
#[distributed_model]
pub struct Untied {
    wte: Embedding<10, 4>,
    #[layer(input = 4, output = 10)]
    lm_head: TiedHead<4, 10>,
}

#[distributed_model]
pub struct Tied {
    wte: Embedding<10, 4>,
    #[layer(input = 4, output = 10)]
    #[tied(wte)]
    lm_head: TiedHead<4, 10>,
}

// Nor can a tie read the weight of an embedding described by `#[layer(..)]`.
#[distributed_model]
pub struct ToDescribed {
    #[layer(input = 1, output = 4, params(weight = [10, 4]))]
    wte: Embedding<10, 4>,
    #[tied(wte)]
    lm_head: TiedHead<4, 10>,
}

fn main() {}
