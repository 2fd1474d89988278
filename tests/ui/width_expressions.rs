use overlap::prelude::*;

const W: usize = 4;

// Widths the macro cannot read a value from: an expression and a constant, each named.
#[distributed_model(bucket_cap_mb = "8")]
pub struct M {
    fc: Linear<{ 2 * 2 }, 8>,
    fc2: Linear<8, { W }>,
    head: Linear<W, 2>,
}

fn main() {}
