//! Lints the user's struct allows are not raised again by the generated code under
//! `deny(warnings)`: names made from a field's (`FC_out`, `FC_weight`) and reads of a
//! `#[deprecated]` field speak only where the user wrote them.
#![deny(warnings)]
use overlap::prelude::*;

#[allow(non_snake_case)]
#[distributed_model]
pub struct Net {
    FC: Linear<4, 4>,
    #[deprecated = "kept for old checkpoints"]
    head: Linear<4, 2>,
}

fn main() {
    let model = Net::init(0);
    let _grads = model.new_grads();
    assert_eq!(Net::SCHEDULE.layers[0].name, "FC");
}
