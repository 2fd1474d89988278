//! An `#[init(..)]` or `#[bucket_boundary]` that cannot be read is reported at the token that
//! cannot be, not across the whole attribute.
use overlap::prelude::*;

#[distributed_model]
pub struct Net {
    #[init(std 0.02)]
    fc1: Linear<4, 4>,
    #[init(ends_with("fc2.weight" std = 0.1))]
    fc2: Linear<4, 4>,
    #[bucket_boundary(after)]
    fc3: Linear<4, 4>,
    #[bucket_boundary = true]
    fc4: Linear<4, 4>,
    #[bucket_boundary()]
    fc5: Linear<4, 2>,
}

fn main() {}
