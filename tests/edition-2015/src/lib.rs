//! Models in a 2015-edition crate, of built-in layers and of a layer of its own: they compile.
#![deny(warnings)]

extern crate overlap;

use overlap::prelude::*;

/// Built-in layers only.
#[distributed_model]
pub struct Mlp {
    fc1: Linear<4, 8>,
    act: Relu,
    fc2: Linear<8, 2>,
}

/// A layer of one's own: a gain per feature.
pub struct Gain {
    gain: Vec<f32>,
}

impl Layer for Gain {
    const PARAMS: &'static [overlap::ParamDef] = &[overlap::ParamDef { name: "gain", shape: &[8] }];
    const WIDTH: overlap::Width = overlap::Width::Preserving;
    type Saved = ();

    fn init(_rng: &mut overlap::InitRng) -> Self {
        Gain { gain: vec![1.0; 8] }
    }
    fn param(&self, _index: usize) -> &[f32] {
        &self.gain
    }
    fn param_mut(&mut self, _index: usize) -> &mut [f32] {
        &mut self.gain
    }
    fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _saved: &mut ()) {
        output.resize(input.rows(), input.cols());
        for (o, (x, g)) in output.as_mut_slice().iter_mut().zip(input.as_slice().iter().zip(self.gain.iter().cycle())) {
            *o = x * g;
        }
    }
    fn backward(
        &self,
        _ctx: &StepContext,
        input: &Matrix,
        _output: &Matrix,
        _saved: &(),
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        _accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        let width = self.gain.len();
        for (row, dy) in input.as_slice().chunks(width).zip(grad_output.as_slice().chunks(width)) {
            for ((g, x), d) in grads[0].iter_mut().zip(row).zip(dy) {
                *g += x * d;
            }
        }
        if let Some(dx) = grad_input {
            dx.resize(input.rows(), input.cols());
            for (o, (d, g)) in
                dx.as_mut_slice().iter_mut().zip(grad_output.as_slice().iter().zip(self.gain.iter().cycle()))
            {
                *o = d * g;
            }
        }
    }
}

/// With a layer of one's own, whose constants the expansion checks at its type.
#[distributed_model]
pub struct Scaled {
    fc1: Linear<4, 8>,
    #[layer(params(gain = [8]))]
    gain: Gain,
    fc2: Linear<8, 2>,
}
