use overlap::prelude::*;

// The macro reads the module before the calls in it expand: the `Block` that `block!` writes is
// not seen, so the field is no layer, and the call is told why. `macro_rules!` itself is no call.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    macro_rules! block {
        ($name:ident) => {
            pub struct $name {
                fc: Linear<4, 4>,
            }
        };
    }

    block!(Block);

    pub struct Net {
        fc: Linear<4, 4>,
        blocks: [Block; 2],
    }
}

fn main() {}
