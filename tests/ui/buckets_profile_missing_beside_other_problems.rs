use overlap::prelude::*;

// A profile that cannot be read is reported with the model's own problems, in one compile.
#[distributed_model(buckets = profile("tests/ui/no-such-profile.json"))]
struct Model {
    fc: Linear<8, 4>,
    head: Linear<5, 2>,
}

fn main() {}
