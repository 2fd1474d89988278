use overlap::prelude::*;

// Without `model = ..`, the struct no other uses is the model: one that holds plain data beside
// the model (settings, a count) is then told how to stay a struct of one's own.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        b: Block,
        head: Linear<4, 2>,
    }

    pub struct Run {
        pub net: Net,
        pub steps: usize,
    }
}

fn main() {}
