use overlap::prelude::*;

// Every problem with `buckets = auto(...)` at once: a bad link, a zero world, an unknown key.
#[distributed_model(buckets = auto(link = "infiniband", world = 0, speed = 3))]
struct BadArgs {
    fc: Linear<8, 4>,
}

// A link and a world size are required.
#[distributed_model(buckets = auto(batch = 32))]
struct Missing {
    fc: Linear<8, 4>,
}

// Size caps and a planner contradict each other.
#[distributed_model(bucket_cap_mb = 8, buckets = auto(link = "ib-hdr", world = 8))]
struct Both {
    fc: Linear<8, 4>,
}

// Not a planner.
#[distributed_model(buckets = greedy(world = 8))]
struct Unknown {
    fc: Linear<8, 4>,
}

fn main() {}
