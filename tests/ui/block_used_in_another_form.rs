use overlap::prelude::*;

// A block used in a form the macro does not unroll (an array of arrays, a path) is one error at
// the field's type: the block is still used, not a second model.
#[distributed_model]
mod n {
    use overlap::prelude::*;

    pub struct B {
        fc: Linear<4, 4>,
    }

    pub struct N {
        b: [[B; 2]; 2],
    }
}

#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct B {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        b: net::B,
        head: Linear<4, 2>,
    }
}

// A block naming the model in a form of its own leaves the model the model: one error, at `Vec<Net>`.
#[distributed_model]
mod back {
    use overlap::prelude::*;

    pub struct B {
        fc: Linear<4, 4>,
        up: Vec<Net>,
    }

    pub struct Net {
        b: B,
        head: Linear<4, 2>,
    }
}

fn main() {}
