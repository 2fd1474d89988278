use overlap::prelude::*;

// A boundary on the first layer separates nothing whatever the other layers are: it is reported
// in the same compile as a layer type the macro does not know. One after an unknown layer may
// separate it from the first, and is not judged.
#[distributed_model]
pub struct Net {
    #[bucket_boundary]
    fc1: Linear<4, 4>,
    conv: Conv2d,
    #[bucket_boundary]
    fc2: Linear<4, 2>,
}

fn main() {}
