use overlap::prelude::*;

#[distributed_model]
enum Model {
    Fc(Linear<4, 2>),
}

fn main() {}
