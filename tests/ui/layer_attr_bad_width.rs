use overlap::prelude::*;
use overlap::{InitRng, ParamDef, Width};

/// Element-wise scale: one weight per feature.
struct Scale {
    weight: Vec<f32>,
}

impl Layer for Scale {
    const PARAMS: &'static [ParamDef] = &[ParamDef { name: "weight", shape: &[4] }];
    const WIDTH: Width = Width::Preserving;
    type Saved = ();

    fn init(_rng: &mut InitRng) -> Self {
        Scale { weight: vec![1.0; 4] }
    }
    fn param(&self, _index: usize) -> &[f32] {
        &self.weight
    }
    fn param_mut(&mut self, _index: usize) -> &mut [f32] {
        &mut self.weight
    }
    fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _saved: &mut ()) {
        output.resize(input.rows(), input.cols());
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

// A width that is no positive integer is one error at the value, not also a missing key.
#[distributed_model]
struct Model {
    fc: Linear<8, 4>,
    #[layer(input = 0, output = 4, params(weight = [4]))]
    scale: Scale,
}

fn main() {}
