//! A layer of one's own whose parameter is named in capitals (`W`): the generated gradient view
//! `gain_W` raises no `non_snake_case` warning of its own under `deny(warnings)`.
#![deny(warnings)]
use overlap::prelude::*;

/// `y = x * W`, one weight per feature of 4.
pub struct Gain {
    w: Vec<f32>,
}

impl Layer for Gain {
    const PARAMS: &'static [ParamDef] = &[ParamDef { name: "W", shape: &[4] }];
    const WIDTH: Width = Width::Preserving;
    type Saved = ();

    fn init(_rng: &mut InitRng) -> Self {
        Gain { w: vec![1.0; 4] }
    }
    fn param(&self, _index: usize) -> &[f32] {
        &self.w
    }
    fn param_mut(&mut self, _index: usize) -> &mut [f32] {
        &mut self.w
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

#[distributed_model]
pub struct Net {
    fc: Linear<4, 4>,
    #[layer(params(W = [4]))]
    gain: Gain,
    head: Linear<4, 2>,
}

fn main() {
    let _ = Net::init(0).new_grads();
}
