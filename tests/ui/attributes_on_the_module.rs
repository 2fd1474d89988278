// This macro's field and block attributes on the module itself: each said where it goes, and none
// left for the compiler to call unknown.
#[overlap::distributed_model]
#[residual]
#[bucket_boundary]
#[init(std = 0.02)]
#[cfg_attr(all(), residual)]
mod net {
    use overlap::prelude::*;

    pub struct Net {
        fc: Linear<4, 4>,
        head: Linear<4, 2>,
    }
}

fn main() {}
