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

// A layer type of one's own is not a model.
#[distributed_model(model = Gain)]
mod layer_type {
    use overlap::prelude::*;
    use overlap::{InitRng, ParamDef, Width};

    pub struct Gain {
        gain: Vec<f32>,
    }

    impl overlap::Layer for Gain {
        const PARAMS: &'static [ParamDef] = &[ParamDef { name: "gain", shape: &[4] }];
        const WIDTH: Width = Width::Preserving;
        type Saved = ();

        fn init(_rng: &mut InitRng) -> Self {
            Gain { gain: vec![1.0; 4] }
        }
        fn param(&self, _index: usize) -> &[f32] {
            &self.gain
        }
        fn param_mut(&mut self, _index: usize) -> &mut [f32] {
            &mut self.gain
        }
        fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _saved: &mut ()) {
            output.clone_from(input);
        }
        fn backward(
            &self,
            _ctx: &StepContext,
            _input: &Matrix,
            _output: &Matrix,
            _saved: &(),
            _grad_output: &Matrix,
            _grads: &mut [&mut [f32]],
            _accumulate: bool,
            _grad_input: Option<&mut Matrix>,
        ) {
        }
    }

    pub struct Net {
        fc: Linear<4, 4>,
        #[layer(params(gain = [4]))]
        gain: Gain,
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

fn main() {}
