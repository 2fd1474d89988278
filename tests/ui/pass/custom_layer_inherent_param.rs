//! A layer of one's own may have inherent methods named as `Layer`'s (`param`, `param_mut`):
//! the generated code calls the trait's.
use overlap::prelude::*;
use overlap::{InitRng, ParamDef, Width};

pub struct Gain {
    gain: Vec<f32>,
}

impl Gain {
    /// Looked up by name, as a user's own API might.
    pub fn param(&self, name: &str) -> Option<&[f32]> {
        (name == "gain").then_some(&self.gain[..])
    }

    pub fn param_mut(&mut self) -> &mut Vec<f32> {
        &mut self.gain
    }
}

impl Layer for Gain {
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

#[distributed_model]
pub struct Net {
    fc: Linear<4, 4>,
    #[layer(params(gain = [4]))]
    gain: Gain,
}

fn main() {
    let mut net = Net::init(0);
    let gain = overlap::plan::ParamRef { layer: 1, param: 0 };
    assert_eq!(overlap::DistributedModel::param(&net, gain), &[1.0; 4]);
    overlap::DistributedModel::param_mut(&mut net, gain)[0] = 2.0;
    assert_eq!(net.gain.param("gain").unwrap()[0], 2.0);
    assert_eq!(net.gain.param_mut().len(), 4);
}
