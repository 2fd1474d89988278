use overlap::prelude::*;

// The residual blocks `a_b` and `a.b` would share their sum's workspace entry.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    #[residual]
    pub struct R1 {
        x: Linear<4, 4>,
    }

    #[residual]
    pub struct R2 {
        y: Linear<4, 4>,
    }

    pub struct Outer {
        b: R2,
    }

    pub struct Net {
        a_b: R1,
        a: Outer,
    }
}

fn main() {}
