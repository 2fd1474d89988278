use overlap::prelude::*;

// A model of the struct form holding itself: one error, and no "infinite size" from the compiler.
#[distributed_model]
pub struct Net {
    fc: Linear<4, 4>,
    again: Net,
}

#[distributed_model]
pub struct Again {
    fc: Linear<4, 4>,
    again: Self,
}

fn main() {}
