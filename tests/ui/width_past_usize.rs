use overlap::prelude::*;

// A width written as an integer literal that no `usize` holds.
#[distributed_model]
pub struct Net {
    fc: Linear<4, 18446744073709551616>,
}

fn main() {}
