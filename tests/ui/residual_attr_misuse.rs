use overlap::prelude::*;

// `#[residual]` on the model, and twice on a block: the macro's errors only.
#[distributed_model]
mod on_the_model {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    #[residual]
    pub struct Net {
        block: Block,
    }
}

#[distributed_model]
mod twice {
    use overlap::prelude::*;

    #[residual]
    #[residual]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
    }
}

fn main() {}
