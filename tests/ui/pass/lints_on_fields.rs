//! Lints the user's struct allows are not raised again by the generated code under
//! `deny(warnings)`: names made from a field's (`FC_out`, `FC_weight`, `fc__1_out`) and reads of a
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

/// Lowercase, but not snake case either: two underscores in a row.
#[allow(non_snake_case)]
#[distributed_model]
pub struct Doubled {
    fc__1: Linear<4, 4>,
    head: Linear<4, 2>,
}

fn main() {
    let _ = Doubled::init(0).new_grads();
    let model = Net::init(0);
    let _grads = model.new_grads();
    assert_eq!(Net::SCHEDULE.layers[0].name, "FC");
}
