use overlap::prelude::*;

#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block<L> {
        fc: L,
    }

    pub struct Net {
        block: Block<Linear<4, 4>>,
        head: Linear<4, 2>,
    }
}

fn main() {}
