use overlap::prelude::*;

// A generic model is refused, and still emitted: its uses find it, with no second error.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net<T> {
        block: Block,
        extra: T,
    }
}

fn main() {
    let _unused: Option<net::Net<u8>> = None;
}
