#[path = "support/scale.rs"]
mod scale;

use overlap::prelude::*;

// Every layer keeps its input's width: the model's input and output widths are unknown, and the
// data and loss have nothing to be checked against.
#[distributed_model]
pub struct Net {
    #[layer(params(weight = [4]))]
    scale: scale::Scale,
    act: Tanh,
}

fn main() {}
