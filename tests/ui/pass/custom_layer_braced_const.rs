//! A custom layer whose type has a braced const argument (`Gain<{ 2 * 2 }>`): the type's text,
//! braces included, is in the message of its compile-time layout check, never a format string.
use overlap::prelude::*;
use overlap::{InitRng, ParamDef, Width};

/// `y = x * gain`, one gain per feature.
pub struct Gain<const D: usize> {
    gain: Vec<f32>,
}

impl<const D: usize> Layer for Gain<D> {
    const PARAMS: &'static [ParamDef] = &[ParamDef { name: "gain", shape: &[D] }];
    const WIDTH: Width = Width::Fixed { input: D, output: D };
    type Saved = ();

    fn init(_: &mut InitRng) -> Self {
        Gain { gain: vec![1.0; D] }
    }
    fn param(&self, _: usize) -> &[f32] {
        &self.gain
    }
    fn param_mut(&mut self, _: usize) -> &mut [f32] {
        &mut self.gain
    }
    fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        output.resize(input.rows(), D);
    }
    fn backward(
        &self,
        _ctx: &StepContext,
        _input: &Matrix,
        _output: &Matrix,
        _: &(),
        _grad_output: &Matrix,
        _grads: &mut [&mut [f32]],
        _accumulate: bool,
        _grad_input: Option<&mut Matrix>,
    ) {
    }
}

#[distributed_model]
pub struct Scaled {
    fc: Linear<4, 4>,
    #[layer(input = 4, output = 4, params(gain = [4]))]
    gain: Gain<{ 2 * 2 }>,
}

fn main() {
    assert_eq!(Scaled::SCHEDULE.layers[1].kind, "Gain<{ 2 * 2 }>");
}
