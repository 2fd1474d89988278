// A block used before it is defined gives no layers here, but it may hold parameters: a boundary
// before it is not judged on the layers read without it.
#[overlap::distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Net {
        fc: Linear<4, 4>,
        #[bucket_boundary]
        act: Relu,
        later: Later,
    }

    pub struct Later {
        head: Linear<4, 2>,
    }
}

fn main() {}
