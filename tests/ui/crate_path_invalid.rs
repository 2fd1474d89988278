use overlap::prelude::*;

// `crate` names a path (a renamed dependency or a re-export), not a number.
#[distributed_model(crate = 3)]
pub struct Model {
    fc: Linear<4, 2>,
}

fn main() {}
