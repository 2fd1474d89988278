use overlap::prelude::*;

// An item beside the model named as a type the macro emits: the compiler's one error (E0428)
// each, none at the attribute.
#[distributed_model]
pub struct M {
    fc: Linear<4, 2>,
}

pub struct MGrads;

#[distributed_model]
pub struct W {
    fc: Linear<4, 2>,
}

pub enum WWorkspace {}

#[distributed_model]
pub struct F {
    fc: Linear<4, 2>,
}

pub type FInFlight = ();

fn main() {}
