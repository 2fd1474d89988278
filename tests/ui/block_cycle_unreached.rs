use overlap::prelude::*;

// Blocks that hold each other, which the model never uses: one error naming the cycle, not a
// program that compiles with two blocks nothing trains.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct B {
        fc: Linear<4, 4>,
        c: C,
    }

    pub struct C {
        fc: Linear<4, 4>,
        b: B,
    }

    pub struct Net {
        fc: Linear<4, 4>,
        head: Linear<4, 2>,
    }
}

fn main() {}
