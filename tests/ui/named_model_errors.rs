use overlap::prelude::*;

// `model = ..` names a struct of layers and blocks in the module, by its name alone.
#[distributed_model(model = Missing)]
mod missing {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
    }
}

// A layer type of one's own is not a model. The macro knows one by an `impl` of a trait named
// `Layer` (the program's own here, so that no whole layer need be written out).
#[distributed_model(model = Gain)]
mod layer_type {
    use overlap::prelude::*;

    pub trait Layer {}

    pub struct Gain {
        gain: Vec<f32>,
    }

    impl Layer for Gain {}

    pub struct Net {
        fc: Linear<4, 4>,
    }
}

#[distributed_model(model = self::Net)]
mod path {
    use overlap::prelude::*;

    pub struct Net {
        fc: Linear<4, 4>,
    }
}

// A struct the model does not use is left as written: this macro's attributes on it are errors.
#[distributed_model(model = Net)]
mod attributes_on_own {
    use overlap::prelude::*;

    pub struct Net {
        fc: Linear<4, 4>,
    }

    #[residual]
    pub struct Other {
        #[bucket_boundary]
        fc: Linear<4, 4>,
    }
}

// Blocks reach the model through its fields' types alone: through an alias, `Block` is a struct
// of one's own, and the field is no layer.
#[distributed_model(model = Net)]
mod alias {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    type Stack = [Block; 2];

    pub struct Net {
        stack: Stack,
    }
}

// On a struct, the struct is the model.
#[distributed_model(model = Net)]
pub struct Net {
    fc: Linear<4, 4>,
}

// A `model` that names no struct: that error alone, none about the module's structs, which
// cannot be judged without the model.
#[distributed_model(model = 3)]
mod unreadable {
    use overlap::prelude::*;

    pub struct Settings {
        pub steps: usize,
    }

    #[residual]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
        head: Linear<4, 2>,
    }
}

fn main() {}
