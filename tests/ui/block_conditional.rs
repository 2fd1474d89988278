use overlap::prelude::*;

// Structs of a module of blocks cannot be conditional: the plan is made before `cfg` applies.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    #[cfg(debug_assertions)]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    #[cfg_attr(all(), residual)]
    pub struct Other {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
        other: Other,
        head: Linear<4, 2>,
    }
}

fn main() {}
