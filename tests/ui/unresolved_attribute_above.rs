use overlap::prelude::*;

// A derive or attribute that does not resolve, written above `#[distributed_model]`: its own error
// alone, none from the code the macro emits.
#[derive(NotADerive)]
#[distributed_model]
pub struct Net {
    fc: Linear<4, 4>,
    act: Relu,
    head: Linear<4, 2>,
}

#[not_an_attribute]
#[distributed_model]
mod blocks {
    use overlap::prelude::*;

    #[residual]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Model {
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

fn main() {}
