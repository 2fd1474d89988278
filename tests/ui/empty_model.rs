use overlap::prelude::*;

#[distributed_model]
struct Model {}

fn main() {}
