use overlap::prelude::*;

// A head tied to an embedding that is itself malformed: the embedding's error alone, also when the
// embedding's field is a raw identifier (`#[tied(r#type)]`).
#[distributed_model]
pub struct Plain {
    wte: Embedding<100, 0>,
    fc: Linear<16, 16>,
    #[tied(wte)]
    head: TiedHead<16, 100>,
}

#[distributed_model]
pub struct Raw {
    r#type: Embedding<100, 0>,
    fc: Linear<16, 16>,
    #[tied(r#type)]
    head: TiedHead<16, 100>,
}

fn main() {}
