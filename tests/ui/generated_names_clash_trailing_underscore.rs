use overlap::prelude::*;

// A field's generated names drop its trailing underscores (`fc_out` for `fc_`, as `in_out` for a
// field `in_`), so `fc` and `fc_` would share them.
#[distributed_model]
pub struct Net {
    fc: Linear<4, 4>,
    fc_: Linear<4, 2>,
}

fn main() {}
