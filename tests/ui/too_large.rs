use overlap::prelude::*;

// 2^32 x 2^32 weights: the size overflows any address space; refused, not a compiler panic.
#[distributed_model]
struct Huge {
    fc1: Linear<4294967296, 4294967296>,
    act: Relu,
}

fn main() {}
