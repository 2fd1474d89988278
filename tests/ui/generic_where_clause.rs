use overlap::prelude::*;

#[distributed_model]
struct Model
where
    Self: Sized,
{
    fc: Linear<4, 2>,
}

fn main() {}
