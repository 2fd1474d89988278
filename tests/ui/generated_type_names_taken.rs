use overlap::prelude::*;

// Items of the module named as the types the macro emits beside the model.
#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct NetGrads {
        fc: Linear<4, 4>,
    }

    pub type NetWorkspace = u32;

    pub struct Net {
        block: NetGrads,
        head: Linear<4, 2>,
    }
}

fn main() {}
