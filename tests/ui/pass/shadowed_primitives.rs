//! Types of the user's own named `f32`, `usize` and `u64` beside the model: the generated code
//! names the primitive types by their `::core::primitive` paths, never the user's.
#![deny(warnings)]
#![allow(non_camel_case_types)]

mod flat {
    use overlap::prelude::*;

    pub type f32 = u8;
    pub type usize = u8;
    pub type u64 = u8;

    #[distributed_model]
    pub struct Mlp {
        fc1: Linear<16, 16>,
        act: Relu,
        fc2: Linear<16, 4>,
    }
}

#[overlap::distributed_model]
mod blocks {
    use overlap::prelude::*;

    pub type f32 = u8;
    pub type usize = u8;
    pub type u64 = u8;

    #[residual]
    pub struct Block {
        fc: Linear<8, 8>,
    }

    pub struct Net {
        input: Linear<4, 8>,
        blocks: [Block; 2],
        head: Linear<8, 2>,
    }
}

fn main() {
    use overlap::DistributedModel;
    assert_eq!(flat::Mlp::SCHEDULE.layers.len(), 3);
    assert_eq!(blocks::Net::SCHEDULE.layers.len(), 4);
}
