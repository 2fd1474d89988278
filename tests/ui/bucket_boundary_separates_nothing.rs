use overlap::prelude::*;

// A boundary with no parameters before it, or none from it on, separates nothing.
#[distributed_model]
pub struct First {
    #[bucket_boundary]
    fc: Linear<2, 4>,
    head: Linear<4, 3>,
}

#[distributed_model]
pub struct Last {
    fc: Linear<2, 4>,
    head: Linear<4, 3>,
    #[bucket_boundary]
    act: Relu,
}

fn main() {}
