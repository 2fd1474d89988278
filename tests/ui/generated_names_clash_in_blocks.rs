use overlap::prelude::*;

// A clash made inside a repeated block is one error, at the field that makes it in that block,
// however many copies there are.
#[distributed_model]
mod repeated {
    use overlap::prelude::*;

    pub struct Inner {
        fc: Linear<4, 4>,
    }

    pub struct Block {
        c: Inner,
        c_fc: Linear<4, 4>,
    }

    pub struct Net {
        b: [Block; 4],
        head: Linear<4, 3>,
    }
}

// Where both names come through blocks, the error points at the use of a block in the struct
// where the names part (`a: Outer`), not at the layer inside.
#[distributed_model]
mod nested {
    use overlap::prelude::*;

    pub struct Inner {
        fc: Linear<4, 4>,
    }

    pub struct Outer {
        b: Inner,
    }

    pub struct Net {
        a_b: Inner,
        a: Outer,
        head: Linear<4, 3>,
    }
}

// Residual sums, named as layers are (`a_b_sum` for `a_b` and `a.b`): once for all copies too.
#[distributed_model]
mod sums {
    use overlap::prelude::*;

    #[residual]
    pub struct First {
        x: Linear<4, 4>,
    }

    #[residual]
    pub struct Second {
        y: Linear<4, 4>,
    }

    pub struct Outer {
        b: Second,
    }

    pub struct Block {
        a_b: First,
        a: Outer,
    }

    pub struct Net {
        blocks: [Block; 3],
        head: Linear<4, 3>,
    }
}

fn main() {}
