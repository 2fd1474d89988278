// A block named after `self::` is the module's own struct, as its name alone is: used, and
// repeated, it is unrolled (`a.fc`, `b.0.fc`, `b.1.fc`).
#[overlap::distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        a: self::Block,
        b: [self::Block; 2],
        head: Linear<4, 2>,
    }
}

fn main() {
    use overlap::DistributedModel;
    let s = &net::Net::SCHEDULE;
    let names: Vec<String> = s.params().map(|p| s.param_name(p)).collect();
    assert_eq!(names[..4], ["a.fc.weight", "a.fc.bias", "b.0.fc.weight", "b.0.fc.bias"]);
    assert_eq!(names.len(), 8);
}
