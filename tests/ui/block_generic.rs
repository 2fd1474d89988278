use overlap::prelude::*;

#[distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block<L> {
        fc: L,
    }

    pub struct Net {
        block: Block<Linear<4, 4>>,
        head: Linear<4, 2>,
    }
}


// A `where` clause alone makes a struct no less generic: one error at each clause.
#[distributed_model]
mod where_clauses {
    use overlap::prelude::*;

    pub struct Block
    where
        Self: Sized,
    {
        fc: Linear<4, 4>,
    }

    pub struct Net
    where
        Self: Sized,
    {
        block: Block,
        head: Linear<4, 2>,
    }
}

fn main() {}
