use overlap::prelude::*;

#[distributed_model]
struct Model(Linear<4, 2>);

fn main() {}
