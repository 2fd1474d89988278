use overlap::prelude::*;

// A setting that cannot be read is one error at its first unreadable token; the settings around
// it are still read: `model = Net` before a missing comma still names the model (no error about
// `Settings`), and the end of a setting left unfinished is pointed at.
#[distributed_model(model = Net bucket_cap_mb = 8, first_bucket_mb = 1)]
pub mod missing_comma {
    use overlap::prelude::*;

    pub struct Settings {
        pub lr: f32,
    }

    pub struct Net {
        fc: Linear<4, 4>,
        head: Linear<4, 2>,
    }
}

#[distributed_model(first_bucket_mb = 1, bucket_cap_mb =)]
pub struct Unfinished {
    fc: Linear<4, 2>,
}

#[distributed_model(bucket_cap_mb = 8,, first_bucket_mb = 1)]
pub struct TwoCommas {
    fc: Linear<4, 2>,
}

#[distributed_model(, bucket_cap_mb = 8, bucket_cap_mb = 4,)]
pub struct LeadingComma {
    fc: Linear<4, 2>,
}

fn main() {}
