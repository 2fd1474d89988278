use overlap::prelude::*;

// Each array is within its bound, but together they would be 2^30 layers.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct A {
        fc: Linear<4, 4>,
    }

    pub struct B {
        a: [A; 1024],
    }

    pub struct C {
        b: [B; 1024],
    }

    pub struct Net {
        c: [C; 1024],
    }
}

fn main() {}
