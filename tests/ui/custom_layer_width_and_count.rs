use overlap::prelude::*;
#[path = "support/scale.rs"]
mod scale;
use scale::Scale;

// `Scale` preserves the width and holds one parameter, `weight` of `[4]`. Each field below
// plans it otherwise in one respect, and its error names that constant.
#[distributed_model]
struct Model {
    fc: Linear<4, 4>,
    // Planned as `Width::Fixed`, even with equal widths.
    #[layer(input = 4, output = 4, params(weight = [4]))]
    fixed: Scale,
    // Two parameters planned.
    #[layer(params(weight = [4], bias = [4]))]
    two: Scale,
    // Planned as a matrix.
    #[layer(params(weight = [4, 1]))]
    matrix: Scale,
}

fn main() {}
