use overlap::prelude::*;

// 2^41 weights: within the address space, but beyond the 2^31 - 1 elements a tensor may have
// (the kernels and collectives address it with a C `int`); refused when it compiles.
#[distributed_model]
struct Wide {
    fc1: Linear<1099511627776, 2>,
    act: Relu,
    #[layer(input = 2, output = 3000000000)]
    fan_out: FanOut,
}

pub struct FanOut;

fn main() {}
