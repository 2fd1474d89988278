use overlap::prelude::*;

// `y = x + f(x)` needs `f` to keep the width.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    #[residual]
    pub struct Widen {
        fc: Linear<6, 8>,
    }

    pub struct Net {
        input: Linear<4, 6>,
        widen: Widen,
    }
}

fn main() {}
