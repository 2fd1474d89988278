use overlap::prelude::*;

// A residual block that changes the width is the block's error alone: which width was meant is
// unknown, so neither the layer after it nor the next copy is judged against one (here the head
// takes the block's input width, in `residual_widths_differ_at_the_start` its output's).
#[distributed_model]
mod net {
    use overlap::prelude::*;

    #[residual]
    pub struct Widen {
        norm: LayerNorm<4>,
        fc: Linear<4, 5>,
    }

    pub struct Net {
        input: Linear<2, 4>,
        widen: [Widen; 3],
        head: Linear<4, 3>,
    }
}

fn main() {}
