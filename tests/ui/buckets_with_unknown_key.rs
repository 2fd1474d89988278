use overlap::prelude::*;

// An unknown key beside `buckets = ...` is reported once, at the key: it is not one of the size
// caps that `buckets` contradicts.
#[distributed_model(buckets = auto(link = "ib-hdr", world = 8), bucket_size_mb = 8)]
pub struct M {
    fc: Linear<4, 2>,
}

fn main() {}
