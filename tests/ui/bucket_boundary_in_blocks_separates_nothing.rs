// In a block, a boundary stands at every copy and use of the block: refused where it separates
// nothing at all of them, kept where one copy needs it.
#[overlap::distributed_model]
mod on_block_field {
    use overlap::prelude::*;

    pub struct B {
        fc: Linear<4, 4>,
        act: Tanh,
    }

    pub struct Net {
        #[bucket_boundary]
        b: B,
        head: Linear<4, 2>,
    }
}

#[overlap::distributed_model]
mod inside_a_block {
    use overlap::prelude::*;

    pub struct B {
        fc: Linear<4, 4>,
        #[bucket_boundary]
        act: Tanh,
    }

    pub struct Net {
        head: Linear<4, 4>,
        b: B,
    }
}

// Each use of the block says its own reason.
#[overlap::distributed_model]
mod reasons_differ {
    use overlap::prelude::*;

    pub struct B {
        #[bucket_boundary]
        act: Tanh,
    }

    pub struct Net {
        b1: B,
        fc: Linear<4, 4>,
        b2: B,
    }
}

// One reason at every copy of a repeated block: said once.
#[overlap::distributed_model]
mod same_reason_at_every_copy {
    use overlap::prelude::*;

    pub struct Act {
        act: Relu,
    }

    pub struct Net {
        fc: Linear<4, 4>,
        #[bucket_boundary]
        tail: [Act; 3],
    }
}

// Two block fields that begin at the same layer: each boundary is judged.
#[overlap::distributed_model]
mod nested_at_one_layer {
    use overlap::prelude::*;

    pub struct Inner {
        fc: Linear<4, 4>,
    }

    pub struct Outer {
        #[bucket_boundary]
        inner: Inner,
        fc: Linear<4, 4>,
    }

    pub struct Net {
        #[bucket_boundary]
        outer: Outer,
        head: Linear<4, 2>,
    }
}

#[overlap::distributed_model]
mod kept_for_the_later_copies {
    use overlap::prelude::*;

    pub struct B {
        #[bucket_boundary]
        fc: Linear<4, 4>,
    }

    pub struct Net {
        #[bucket_boundary]
        blocks: [B; 3],
        head: Linear<4, 2>,
    }
}

fn main() {}
