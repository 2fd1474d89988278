//! A layer of one's own for the UI tests: element-wise scale, one weight per feature of 4. Not
//! a test itself (the UI tests are the files directly in `tests/ui/` and `tests/ui/pass/`).
use overlap::prelude::*;
use overlap::{InitRng, ParamDef, Width};

pub struct Scale {
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
        for r in 0..input.rows() {
            for ((o, x), w) in output.row_mut(r).iter_mut().zip(input.row(r)).zip(&self.weight) {
                *o = x * w;
            }
        }
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
