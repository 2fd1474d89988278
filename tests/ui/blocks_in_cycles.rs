use overlap::prelude::*;

// The model containing itself, a block naming itself `Self`, and two blocks containing each
// other: one error each, and none from the compiler about infinitely large types.
#[distributed_model]
mod itself {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
        again: Net,
    }
}

#[distributed_model]
mod self_type {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
        me: Self,
    }

    pub struct Net {
        block: Block,
    }
}

#[distributed_model]
mod cycle {
    use overlap::prelude::*;

    pub struct A {
        fc: Linear<4, 4>,
        b: B,
    }

    pub struct B {
        fc: Linear<4, 4>,
        a: A,
    }

    pub struct Net {
        a: A,
    }
}

fn main() {}
