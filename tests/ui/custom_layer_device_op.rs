use overlap::prelude::*;
use overlap::{DeviceOp, InitRng, ParamDef, Width};

/// A per-feature scale that names ReLU's kernels: on the GPU they would run on it as on a layer
/// without parameters.
pub struct Leaky {
    weight: Vec<f32>,
}

impl Layer for Leaky {
    const PARAMS: &'static [ParamDef] = &[ParamDef { name: "weight", shape: &[4] }];
    const WIDTH: Width = Width::Preserving;
    const DEVICE_OP: DeviceOp = DeviceOp::Relu;
    type Saved = ();

    fn init(_rng: &mut InitRng) -> Self {
        Leaky { weight: vec![1.0; 4] }
    }
    fn param(&self, _index: usize) -> &[f32] {
        &self.weight
    }
    fn param_mut(&mut self, _index: usize) -> &mut [f32] {
        &mut self.weight
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
        grad_output: &Matrix,
        _grads: &mut [&mut [f32]],
        _accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        if let Some(dx) = grad_input {
            dx.clone_from(grad_output);
        }
    }
}

#[distributed_model]
struct Model {
    fc: Linear<4, 4>,
    #[layer(params(weight = [4]))]
    act: Leaky,
    head: Linear<4, 2>,
}

fn main() {}
