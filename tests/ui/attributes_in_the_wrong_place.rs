// The macro's attributes where they do not go: one error each from the macro, at the attribute,
// saying where it goes (not the compiler's "cannot find attribute").
#[overlap::distributed_model]
mod net {
    use overlap::prelude::*;

    #[init(std = 0.02)]
    #[bucket_boundary]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        #[residual]
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

fn main() {}
