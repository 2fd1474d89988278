use overlap::prelude::*;

// A draft struct left beside the model, above it: the model is the struct that uses the
// module's blocks, and the draft is the one reported; code using the model compiles on.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Draft {
        fc: Linear<4, 4>,
    }

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
    }
}

fn main() {
    let comm = Communicator::single();
    let _ = net::Net::new(&comm, 0);
}
