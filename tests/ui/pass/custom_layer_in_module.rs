//! A layer of one's own defined inside the module of a model with blocks is a layer, not a
//! block: the field's `#[layer(..)]` says so. A block that implements a trait named `Layer`
//! (here the user's own) stays a block.
use overlap::prelude::*;

#[distributed_model]
mod net {
    use overlap::prelude::*;
    use overlap::{InitRng, ParamDef, Width};

    /// Multiplies each column by a learned gain.
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
            output.resize(input.rows(), input.cols());
            for r in 0..input.rows() {
                for (o, (x, g)) in output.row_mut(r).iter_mut().zip(input.row(r).iter().zip(&self.gain)) {
                    *o = x * g;
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

    #[residual]
    pub struct Block {
        fc: Linear<4, 4>,
        #[layer(params(gain = [4]))]
        gain: Gain,
    }

    pub struct Net {
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

#[distributed_model]
mod own_trait {
    use overlap::prelude::*;

    /// A trait of the program's own that happens to share the name.
    pub trait Layer {
        fn describe(&self) -> &'static str;
    }

    pub struct Block {
        fc: Linear<4, 4>,
    }

    impl Layer for Block {
        fn describe(&self) -> &'static str {
            "a block"
        }
    }

    pub struct Net {
        blocks: [Block; 2],
    }
}

fn main() {
    let schedule = <own_trait::Net as overlap::DistributedModel>::SCHEDULE;
    let names: Vec<&str> = schedule.layers.iter().map(|l| l.name.as_ref()).collect();
    assert_eq!(names, ["blocks.0.fc", "blocks.1.fc"]);

    let net = net::Net::init(0);
    let schedule = <net::Net as overlap::DistributedModel>::SCHEDULE;
    let names: Vec<&str> = schedule.layers.iter().map(|l| l.name.as_ref()).collect();
    assert_eq!(names, ["blocks.0.fc", "blocks.0.gain", "blocks.1.fc", "blocks.1.gain", "head"]);
    let gain = overlap::plan::ParamRef { layer: 3, param: 0 };
    assert_eq!(overlap::DistributedModel::param(&net, gain), &[1.0; 4]);
}
