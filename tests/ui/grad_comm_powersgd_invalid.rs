use overlap::prelude::*;

// PowerSGD without a rank, with a rank of zero, an unknown key, a repeated key and a start that
// is not an integer: every problem is reported.
#[distributed_model(grad_comm = powersgd())]
pub struct NoRank {
    fc: Linear<64, 64>,
}

#[distributed_model(grad_comm = powersgd(rank = 0, iters = 3))]
pub struct ZeroRank {
    fc: Linear<64, 64>,
}

#[distributed_model(grad_comm = powersgd(rank = 4, rank = 2, start_iter = "ten"))]
pub struct Repeated {
    fc: Linear<64, 64>,
}

#[distributed_model(grad_comm = lowrank(rank = 4))]
pub struct Unknown {
    fc: Linear<64, 64>,
}

fn main() {}
