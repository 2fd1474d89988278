use overlap::prelude::*;

#[distributed_model]
struct Model {
    fc: Linear<8, 4>,
    // Neither `reverse` nor `definition`.
    #[layer(input = 4, output = 4, params(gain = [4]), ready = sideways)]
    gain: Linear<4, 4>,
}

fn main() {}
