use overlap::prelude::*;

// PowerSGD's factors cannot be reduce-scattered: a sharded optimizer state with them is refused
// here, not by every run.
#[distributed_model(shard_optimizer, grad_comm = powersgd(rank = 2))]
pub struct Flag {
    fc: Linear<4, 2>,
}

#[distributed_model(grad_comm = powersgd(rank = 4, start_iter = 10), shard_optimizer = true)]
pub struct Pair {
    fc: Linear<4, 2>,
}

// Turned off, or with a format sent whole, sharding is fine.
#[distributed_model(shard_optimizer = false, grad_comm = powersgd(rank = 2))]
pub struct Off {
    fc: Linear<4, 2>,
}

#[distributed_model(shard_optimizer, grad_comm = bf16)]
pub struct Bf16 {
    fc: Linear<4, 2>,
}

fn main() {}
