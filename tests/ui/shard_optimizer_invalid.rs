use overlap::prelude::*;

// A value that is not a bool, a flag given twice, a flag that does not exist, a list, a grouping
// of the all-gathers that does not exist.
#[distributed_model(shard_optimizer = 4)]
struct Value {
    fc: Linear<4, 2>,
}

#[distributed_model(shard_optimizer, shard_optimizer = false)]
struct Twice {
    fc: Linear<4, 2>,
}

#[distributed_model(shard_gradients)]
struct UnknownFlag {
    fc: Linear<4, 2>,
}

#[distributed_model(shard_optimizer(stage = 1))]
struct List {
    fc: Linear<4, 2>,
}

#[distributed_model(shard_optimizer, gathers = per_block)]
struct Gathers {
    fc: Linear<4, 2>,
}

fn main() {}
