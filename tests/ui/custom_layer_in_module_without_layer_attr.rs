use overlap::prelude::*;

// A layer of one's own, implemented beside the blocks, used without `#[layer(..)]`: the error is
// at the field that lacks it, not inside the layer's struct (whose fields are no layers).
#[distributed_model]
mod net {
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

    pub struct Block {
        fc: Linear<4, 4>,
        gain: Gain,
    }

    pub struct Net {
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

fn main() {}
