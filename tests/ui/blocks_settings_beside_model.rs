use overlap::prelude::*;

// A struct of one's own beside the model in a module of blocks, the model not named: one error,
// at that struct, naming the model to name; its fields are not read as layers.
#[distributed_model]
pub mod net {
    use overlap::prelude::*;

    pub struct Settings {
        pub lr: f32,
    }

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
        head: Linear<4, 2>,
    }
}

fn main() {}
