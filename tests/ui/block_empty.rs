use overlap::prelude::*;

// A block of no layers is one error at its use. Blocks that are empty only because the blocks
// inside them are get none of their own, and repeats of an empty block are not unrolled one by
// one (a million copies here).
#[distributed_model]
mod nested {
    use overlap::prelude::*;

    pub struct Empty {}

    pub struct Middle {
        empty: [Empty; 1024],
    }

    pub struct Net {
        fc: Linear<4, 4>,
        middle: [Middle; 1024],
    }
}

#[distributed_model]
mod plain {
    use overlap::prelude::*;

    pub struct Empty {}

    pub struct Net {
        fc: Linear<4, 4>,
        empty: Empty,
        head: Linear<4, 2>,
    }
}

fn main() {}
