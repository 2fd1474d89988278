//! A `concat!` of the user's own beside the model: the generated docs use `::core::concat!`,
//! never the user's macro (which would make them malformed `doc` attributes, a warning here).
#![deny(warnings)]

use overlap::prelude::*;

#[allow(unused_macros)]
macro_rules! concat {
    ($($t:tt)*) => {
        42
    };
}

#[distributed_model]
pub struct Mlp {
    fc1: Linear<16, 16>,
    act: Relu,
    fc2: Linear<16, 4>,
}

fn main() {
    assert_eq!(Mlp::SCHEDULE.layers.len(), 3);
}
