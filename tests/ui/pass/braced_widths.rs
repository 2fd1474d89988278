//! Widths and repeat counts in braces or parentheses (`Linear<{ 64 }, 10>`, `[Block; { 2 }]`),
//! and types in parentheses (`(Linear<4, 2>)`, `[(Block); 2]`), are what they hold, as the
//! compiler reads them.
use overlap::prelude::*;

#[distributed_model]
mod net {
    use overlap::prelude::*;

    #[residual]
    pub struct Block {
        fc: Linear<{ 4 }, 4>,
        norm: LayerNorm<{ 4 }>,
    }

    pub struct Net {
        blocks: [(Block); { 2 }],
        head: (Linear<4, { 2 }>),
    }
}

fn main() {
    use overlap::DistributedModel;
    let layers = &<net::Net as DistributedModel>::SCHEDULE.layers;
    assert_eq!(layers.len(), 5);
    assert_eq!(layers[2].name, "blocks.1.fc");
}
