use overlap::prelude::*;
#[path = "support/scale.rs"]
mod scale;
use scale::Scale;

// `#[layer(..)]` on an array of a layer of one's own: the macro's error at the type (an array
// repeats a block), not the compiler's about `[Scale; 2]` deep in the library.
#[distributed_model]
struct Model {
    fc: Linear<8, 4>,
    #[layer(params(weight = [4]))]
    scales: [Scale; 2],
}

fn main() {}
