//! Functions, constants and statics named as the model's generated types (`NetGrads`) live in
//! the value namespace, beside those types: a module of blocks accepts them, as the struct form does.
#![allow(non_snake_case, non_upper_case_globals, dead_code)]

#[overlap::distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
        head: Linear<4, 2>,
    }

    pub fn NetGrads() {}
    pub const NetInFlight: u8 = 0;
    pub static NetGradsOn: u8 = 0;
}

fn main() {
    use overlap::DistributedModel;
    assert_eq!(net::Net::SCHEDULE.layers.len(), 2);
}
