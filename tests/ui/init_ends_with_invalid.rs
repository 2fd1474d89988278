use overlap::prelude::*;

// Every problem of `ends_with(..)` in `#[init]`, reported at once.
#[distributed_model]
pub mod lm {
    use overlap::prelude::*;

    pub struct Mlp {
        c_fc: Linear<8, 8>,
        // Decides its layer whole: the block's suffix below names nothing else.
        #[init(std = 0.1)]
        c_proj: Linear<8, 8>,
    }

    pub struct Lm {
        // A typo names no parameter.
        #[init(std = 0.02, ends_with("c_fc.wieght", std = 0.01))]
        first: [Mlp; 2],
        // Only `c_proj` would match, and its own `#[init]` decides it.
        #[init(std = 0.02, ends_with("c_proj.weight", std = 0.01))]
        second: Mlp,
        #[init(ends_with("weight", std = 0.01), ends_with("weight", std = 0.02))]
        a: Linear<8, 8>,
        #[init(ends_with("", std = 0.01), ends_with(".bias", std = 0.01))]
        b: Linear<8, 8>,
        #[init(ends_with("weight"), ends_with("bias", mean = 0.01), ends_with("bias", std = 0))]
        c: Linear<8, 8>,
        #[init(std = 0.02, std = 0.03)]
        d: Linear<8, 8>,
        #[init()]
        e: Linear<8, 8>,
        // Matched against the layer's own path: `f.weight` and `f.bias`.
        #[init(ends_with("head.weight", std = 0.01))]
        f: Linear<8, 8>,
    }
}

fn main() {}
