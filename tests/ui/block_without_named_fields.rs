use overlap::prelude::*;

// One error per block without named fields, none per use.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Tuple(Linear<4, 4>);

    pub struct Unit;

    pub struct Net {
        fc: Linear<4, 4>,
        tuples: [Tuple; 3],
        unit: Unit,
    }
}

fn main() {}
