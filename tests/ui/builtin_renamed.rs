//! A built-in layer's name given to another built-in by a renamed import: its constants are the
//! same (no parameters, width preserved), but the plan would describe another layer.
use overlap::prelude::*;
use overlap::prelude::Gelu as Relu;

#[distributed_model]
pub struct Model {
    fc: Linear<4, 8>,
    act: Relu,
    head: Linear<8, 2>,
}

fn main() {}
