use overlap::prelude::*;

// `cfg_attr` applying the macro's own attributes is refused once, at the attribute; a
// `cfg_attr` applying anything else (here a doc comment) passes through untouched.
#[distributed_model]
struct Model {
    #[cfg_attr(not(test), doc = "The input layer.")]
    fc1: Linear<8, 8>,
    #[cfg_attr(all(), bucket_boundary)]
    head: Linear<8, 2>,
}

fn main() {}
