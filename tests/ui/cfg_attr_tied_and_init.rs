use overlap::prelude::*;

// `#[tied]` and `#[init]` through `cfg_attr` are refused by name, once each, and the head is
// not then asked for the `#[tied]` it was given.
#[distributed_model]
pub struct Lm {
    #[cfg_attr(all(), init(std = 0.02))]
    wte: Embedding<8, 4>,
    #[cfg_attr(all(), tied(wte))]
    head: TiedHead<4, 8>,
}

fn main() {}
