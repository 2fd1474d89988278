//! `model = Net` names the model, so the module may also hold structs of the program's own: a
//! generic one, one that holds the model, one that names a block, each left as written.
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

fn main() {
    let run = net::Run { net: net::Net::init(0), settings: net::Settings { steps: 3 }, spare: None };
    assert_eq!(run.settings.clone(), net::Settings { steps: 3 });
    assert!(run.spare.is_none());
    let schedule = <net::Net as overlap::DistributedModel>::SCHEDULE;
    let names: Vec<&str> = schedule.layers.iter().map(|l| l.name.as_ref()).collect();
    assert_eq!(names, ["blocks.0.fc", "blocks.1.fc", "head"]);
}
