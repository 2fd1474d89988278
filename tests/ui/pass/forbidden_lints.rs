//! A crate that forbids the lints the generated code allows where the user's names or
//! attributes need it (`non_snake_case`, `non_camel_case_types`, `deprecated`): a model that
//! needs none gets no `allow`, which a `forbid` would refuse. A field named around a keyword
//! (`in_`) is snake case, and so are the names made from it (`in_out`, not `in__out`).
#![forbid(non_snake_case, non_camel_case_types, deprecated)]
#![deny(warnings)]
use overlap::prelude::*;

#[distributed_model]
pub struct Net {
    fc: Linear<4, 4>,
    head: Linear<4, 2>,
}

#[distributed_model]
pub struct Keywords {
    in_: Linear<4, 4>,
    type_: Relu,
    r#loop: Linear<4, 2>,
}

#[distributed_model]
mod stacked {
    use overlap::prelude::*;

    #[residual]
    pub struct Block {
        norm: LayerNorm<4>,
        fc: Linear<4, 4>,
    }

    pub struct Stacked {
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

// Blocks under keyword-like names, and a layer whose name starts with an underscore: the paths
// they make (`in__norm`, `type__0__gate`) are the macro's own, at its call site.
#[distributed_model]
mod keyword_blocks {
    use overlap::prelude::*;

    #[residual]
    pub struct Normed {
        norm: LayerNorm<4>,
        fc: Linear<4, 4>,
    }

    pub struct Gated {
        _gate: Linear<4, 4>,
    }

    pub struct Net {
        in_: Normed,
        type_: [Gated; 2],
        head: Linear<4, 2>,
    }
}

fn main() {
    let _ = Net::init(0).new_grads();
    let _ = stacked::Stacked::init(0).new_grads();
    let _ = Keywords::init(0).new_grads();
    let _ = keyword_blocks::Net::init(0).new_grads();
}
