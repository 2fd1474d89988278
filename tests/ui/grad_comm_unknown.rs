use overlap::prelude::*;

// A wire format that does not exist, and one written as a string: each gets the list of formats.
#[distributed_model(grad_comm = int8)]
pub struct Narrow {
    fc: Linear<4, 2>,
}

#[distributed_model(grad_comm = "bf16")]
pub struct Quoted {
    fc: Linear<4, 2>,
}

fn main() {}
