// Each malformed built-in layer type is one error, the macro's: the struct emitted beside it
// holds none of the compiler's own (wrong number of generic arguments, a negated width).
use overlap::prelude::*;

#[distributed_model]
pub struct Net {
    bare: Linear,
    three: Linear<4, 4, 4>,
    norm: LayerNorm<4, 4>,
    act: Relu<4>,
    negative: Linear<-4, 4>,
    braced: Linear<{ -4 }, 4>,
    head: Linear<4, 2>,
}

fn main() {}
