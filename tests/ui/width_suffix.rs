use overlap::prelude::*;

// A width with an integer suffix other than `usize` would be a constant of another type: one
// error at the literal, none from the compiler.
#[distributed_model]
struct Model {
    fc: Linear<4u32, 2>,
    norm: LayerNorm<2i64>,
    head: Linear<2usize, 2>,
}

fn main() {}
