use overlap::prelude::*;

// A negative number is out of range, as zero is: the same message.
#[distributed_model(buckets = auto(link = "ib-hdr", world = -1, batch = -8, gflops = -5))]
struct Negative {
    fc: Linear<8, 4>,
}

#[distributed_model(buckets = auto(link = "ib-hdr", world = 8, gflops = -2.5))]
struct NegativeFloat {
    fc: Linear<8, 4>,
}

// A device speed, not any positive number.
#[distributed_model(buckets = auto(link = "ib-hdr", world = 8, gflops = 1e-300))]
struct TooSlow {
    fc: Linear<8, 4>,
}

fn main() {}
