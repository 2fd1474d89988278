//! A model in a 2015-edition crate: it compiles.
#![deny(warnings)]

extern crate overlap;

use overlap::prelude::*;

/// Built-in layers only.
#[distributed_model]
pub struct Mlp {
    fc1: Linear<4, 8>,
    act: Relu,
    fc2: Linear<8, 2>,
}
