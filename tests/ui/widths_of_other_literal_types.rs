use overlap::prelude::*;

// A width written as a literal of another type than an integer: one error each, the macro's.
#[distributed_model]
pub struct Net {
    fc: Linear<4, 4.0>,
    norm: LayerNorm<'a'>,
    act: Dropout,
    head: Linear<"4", 2>,
    out: Linear<2, true>,
}

fn main() {}
