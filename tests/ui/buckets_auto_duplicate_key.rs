use overlap::prelude::*;

// A key given twice inside `auto(...)` is an error at each repetition, as everywhere else.
#[distributed_model(buckets = auto(link = "ib-hdr", link = "10gbe", world = 1, world = 64, gflops = 1, gflops = 2))]
struct Model {
    fc: Linear<8, 4>,
}

fn main() {}
