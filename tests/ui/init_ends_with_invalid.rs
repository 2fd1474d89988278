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

    pub struct Block {
        // Written once, in a block repeated below: reported once.
        #[init(std = 0.02, ends_with("fc.wieght", std = 0.01))]
        fc: Linear<8, 8>,
    }

    pub struct Lm {
        // A typo names no parameter.
        #[init(std = 0.02, ends_with("c_fc.wieght", std = 0.01))]
        first: [Mlp; 2],
        // Only `c_proj` would match, and its own `#[init]` decides it.
        #[init(std = 0.02, ends_with("c_proj.weight", std = 0.01))]
        second: Mlp,
        h: [Block; 3],
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
        // Two spreads for `g.weight`.
        #[init(ends_with("weight", std = 0.1), ends_with("g.weight", std = 2.0))]
        g: Linear<8, 8>,
        #[init(ends_with["weight", std = 0.1])]
        k: Linear<8, 8>,
    }
}

// A block refused inside a field with `#[init]`: its own error, no other.
#[distributed_model]
pub mod refused {
    use overlap::prelude::*;

    pub struct Inner(Linear<8, 8>);

    pub struct Outer {
        fc: Linear<8, 8>,
        c_proj: Inner,
    }

    pub struct Net {
        #[init(std = 0.02, ends_with("c_proj.weight", std = 0.01))]
        o: Outer,
    }
}

fn main() {}
