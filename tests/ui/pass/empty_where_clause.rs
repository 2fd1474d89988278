//! A `where` with no bounds is not generic: rustc accepts it, and so does the macro, on a model
//! and on a block.
use overlap::prelude::*;

#[distributed_model]
pub struct Net
where
{
    fc: Linear<4, 4>,
    head: Linear<4, 2>,
}

#[distributed_model]
mod stacked {
    use overlap::prelude::*;

    pub struct Block
    where
    {
        fc: Linear<4, 4>,
    }

    pub struct Stacked {
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

fn main() {
    assert_eq!(Net::SCHEDULE.layers.len(), 2);
    assert_eq!(stacked::Stacked::SCHEDULE.layers.len(), 3);
}
