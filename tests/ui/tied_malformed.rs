use overlap::prelude::*;

// A tie names a field, not a string, and one field: one error each, at the offending token, and
// no second error saying the head has no tie.
#[distributed_model]
pub struct Quoted {
    wte: Embedding<10, 4>,
    fc: Linear<4, 4>,
    #[tied("wte")]
    head: TiedHead<4, 10>,
}

#[distributed_model]
pub struct Two {
    wte: Embedding<10, 4>,
    fc: Linear<4, 4>,
    #[tied(wte, fc)]
    head: TiedHead<4, 10>,
}

fn main() {}
