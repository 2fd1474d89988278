use overlap::prelude::*;

// A block's repeat count with a suffix other than `usize`: one error at the literal, as a
// layer width gets, none from the compiler.
#[distributed_model]
mod n {
    use overlap::prelude::*;

    pub struct B {
        fc: Linear<4, 4>,
    }

    pub struct N {
        b: [B; 2u8],
        c: [B; 1usize],
    }
}

fn main() {}
