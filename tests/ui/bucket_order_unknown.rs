use overlap::prelude::*;

#[distributed_model(bucket_cap_mb = 8, bucket_order = reverse)]
struct Model {
    fc: Linear<4, 2>,
}

#[distributed_model(buckets = auto(link = "ib-hdr", world = 8), bucket_order = ddp_first_iteration)]
struct Auto {
    fc: Linear<4, 2>,
}

fn main() {}
