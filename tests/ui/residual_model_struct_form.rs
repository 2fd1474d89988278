use overlap::prelude::*;

// The struct form's model is no block either: the macro's own error, not the compiler's "cannot
// find attribute".
#[distributed_model]
#[residual]
pub struct Net {
    fc: Linear<4, 4>,
    head: Linear<4, 4>,
}

fn main() {}
