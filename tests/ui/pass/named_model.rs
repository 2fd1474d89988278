//! `model = Net` names the model, so the module may also hold structs of the program's own: a
//! generic one, one that holds the model, one that names a block, each left as written; and
//! one that holds a layer type of one's own, which does not make that type a block.
use overlap::prelude::*;

#[distributed_model(model = Net)]
mod net {
    use overlap::prelude::*;

    /// How long to train: the program's own, generic.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Settings<T> {
        pub steps: T,
    }

    #[residual]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }

    /// The model with its settings, defined after it.
    pub struct Run {
        pub net: Net,
        pub settings: Settings<usize>,
        pub spare: Option<Block>,
    }
}

#[distributed_model(model = Net)]
mod with_layer {
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

    /// The program's own, holding a spare layer: no `#[layer]` here, and none needed.
    pub struct Spare {
        pub gain: Option<Gain>,
    }
}

/// The name as a string, as `crate = ".."` takes its path.
#[distributed_model(model = "Net")]
mod as_a_string {
    use overlap::prelude::*;

    pub struct Settings {
        pub steps: usize,
    }

    pub struct Net {
        fc: Linear<4, 2>,
    }
}

fn main() {
    assert_eq!(as_a_string::Settings { steps: 2 }.steps, 2);
    assert_eq!(<as_a_string::Net as overlap::DistributedModel>::SCHEDULE.model, "Net");
    let spare = with_layer::Spare { gain: None };
    assert!(spare.gain.is_none());
    let schedule = <with_layer::Net as overlap::DistributedModel>::SCHEDULE;
    let names: Vec<&str> = schedule.layers.iter().map(|l| l.name.as_ref()).collect();
    assert_eq!(names, ["fc", "gain"]);

    let run = net::Run { net: net::Net::init(0), settings: net::Settings { steps: 3 }, spare: None };
    assert_eq!(run.settings.clone(), net::Settings { steps: 3 });
    assert!(run.spare.is_none());
    let schedule = <net::Net as overlap::DistributedModel>::SCHEDULE;
    let names: Vec<&str> = schedule.layers.iter().map(|l| l.name.as_ref()).collect();
    assert_eq!(names, ["blocks.0.fc", "blocks.1.fc", "head"]);
}
