use overlap::prelude::*;

// A block used by two fields whose own layers do not chain, or whose residual widths differ, is
// one error at the block's tokens, not one per field: the fault is in its definition.
#[distributed_model]
mod chain {
    use overlap::prelude::*;

    pub struct Res {
        fc1: Linear<4, 8>,
        fc2: Linear<6, 4>,
    }

    pub struct Net {
        a: Res,
        blocks: [Res; 3],
    }
}

#[distributed_model]
mod residual {
    use overlap::prelude::*;

    #[residual]
    pub struct Widen {
        fc: Linear<4, 8>,
    }

    pub struct Net {
        a: Widen,
        down: Linear<8, 4>,
        b: Widen,
        back: Linear<8, 4>,
    }
}

// Inside a block that holds a block: a width its inner block outputs, or one it feeds its inner
// block, is the outer block's own too.
#[distributed_model]
mod nested {
    use overlap::prelude::*;

    pub struct Inner {
        fc: Linear<4, 8>,
    }

    pub struct Feeds {
        fc: Linear<4, 4>,
    }

    pub struct Outer {
        inner: Inner,
        fc: Linear<4, 4>,
        pre: Linear<4, 6>,
        fed: Feeds,
    }

    pub struct Net {
        a: Outer,
        b: Outer,
    }
}

// A width flowing into a block from outside depends on the use: each use that gets a wrong one
// is its own error.
#[distributed_model]
mod from_outside {
    use overlap::prelude::*;

    pub struct Act {
        gelu: Gelu,
        fc: Linear<4, 4>,
    }

    pub struct Net {
        input: Linear<4, 6>,
        a: Act,
        mid: Linear<4, 8>,
        b: Act,
    }
}

fn main() {}
