use overlap::prelude::*;

pub struct Scale;

// Each key of `#[layer(...)]` given twice is named.
#[distributed_model]
pub struct Net {
    fc: Linear<4, 4>,
    #[layer(input = 4, input = 4, output = 4, output = 4, flops = 8, flops = 8, ready = definition, ready = definition, params(w = [4]), params(w = [4]))]
    scale: Scale,
}

fn main() {}
