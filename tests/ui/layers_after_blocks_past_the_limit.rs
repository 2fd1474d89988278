use overlap::prelude::*;

// 2048 layers from the blocks, then one written as a field: the limit counts it too, in whatever
// order the fields come.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct A {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        a: [A; 1024],
        b: [A; 1024],
        head: Linear<4, 2>,
    }
}

fn main() {}
