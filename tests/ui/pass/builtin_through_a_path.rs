//! Built-in layers named through a path (`overlap::Relu`) are guarded as custom types are (the
//! path could name a look-alike), and the guard holds: the model is a `DistributedModel`.
use overlap::prelude::*;

#[distributed_model]
pub struct Model {
    fc: overlap::Linear<4, 4>,
    act: overlap::Relu,
    head: Linear<4, 2>,
}

fn main() {
    let model = Model::init(0);
    let _grads = model.new_grads();
    assert_eq!(Model::SCHEDULE.layers.len(), 3);
}
