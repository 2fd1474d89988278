use overlap::prelude::*;

// One model struct per configuration, each under `cfg`: each conditional struct is one error, and
// which struct is the model is not asked of them (no error about two unused structs).
#[distributed_model]
pub mod m {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    #[cfg(all())]
    pub struct Net {
        b: [Block; 2],
        head: Linear<4, 2>,
    }

    #[cfg(any())]
    pub struct Net {
        b: [Block; 8],
        head: Linear<4, 2>,
    }

    #[cfg(any())]
    pub struct Unused {
        fc: Linear<4, 4>,
    }
}

fn main() {}
