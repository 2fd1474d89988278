use overlap::prelude::*;

/// A module of the program's own whose struct shares a name with a block below.
mod other {
    pub struct Block;
}

// A field's type names a struct of the model's module by its name alone, after `self::` or
// through the module's own name; `super::other::Block` names the other module's `Block`, so the
// `Block` written here is used by no struct and is a second model, not a block.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    #[residual]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        fc: Linear<4, 4>,
        #[layer(params(gain = [4]))]
        outside: super::other::Block,
    }
}

fn main() {}
