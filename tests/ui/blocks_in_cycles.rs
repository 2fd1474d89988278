use overlap::prelude::*;

// The model containing itself, a block naming itself `Self`, two blocks containing each other,
// and two that the model never uses containing each other: one error each, and none from the
// compiler about infinitely large types (nor a program that compiles blocks nothing trains).
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

#[distributed_model]
mod unreached {
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
        fc: Linear<4, 4>,
    }
}

fn main() {}
