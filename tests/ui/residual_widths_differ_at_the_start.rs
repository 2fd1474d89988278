use overlap::prelude::*;

// A residual block first in the model (or after element-wise layers only) still needs `f` to
// keep the width: its input is what its first layer takes.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    #[residual]
    pub struct Widen {
        act: Relu,
        fc: Linear<4, 8>,
    }

    pub struct Net {
        widen: Widen,
        head: Linear<8, 2>,
    }
}

fn main() {}
