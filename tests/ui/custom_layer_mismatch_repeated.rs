use overlap::prelude::*;
#[path = "support/scale.rs"]
mod scale;

// A layer of one's own whose attribute disagrees with its type, in a repeated block: one error
// at the type, naming the first copy.
#[distributed_model]
mod net {
    use super::scale::Scale;
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<8, 4>,
        // The type says `weight` is `[4]`; the attribute says `[8]`.
        #[layer(params(weight = [8]))]
        scale: Scale,
        back: Linear<4, 8>,
    }

    pub struct Net {
        blocks: [Block; 3],
    }
}

fn main() {}
