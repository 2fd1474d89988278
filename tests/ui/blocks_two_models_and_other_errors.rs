use overlap::prelude::*;

// Two candidate models: reported, and the errors in both and in their blocks too, in one compile.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4>,
    }

    pub struct Net {
        block: Block,
        head: Linear<8, 2>,
    }

    pub struct Other {
        head: Linear<4, 2>,
        fc: NotALayer,
    }
}

fn main() {}
