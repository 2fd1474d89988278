//! A model's own inherent items named as the generated trait items (`SCHEDULE`, `new_grads`)
//! take none of the generated code's uses: it names the trait's.
use overlap::prelude::*;

#[distributed_model]
pub struct Net {
    fc: Linear<4, 4>,
    head: Linear<4, 2>,
}

#[allow(dead_code)]
impl Net {
    const SCHEDULE: &'static str = "the user's";

    fn new_grads(&self) -> u8 {
        0
    }
}

fn main() {
    let comm = Communicator::single();
    let mut model = Net::init(0);
    assert_eq!(Net::SCHEDULE, "the user's");
    assert_eq!(<Net as overlap::DistributedModel>::SCHEDULE.layers.len(), 2);
    let grads = overlap::DistributedModel::new_grads(&model);
    let mut ws = NetWorkspace::default();
    let (input, dy) = (Matrix::from_vec(2, 4, vec![0.5; 8]), Matrix::from_vec(2, 2, vec![0.1; 4]));
    overlap::DistributedModel::forward(&model, &input, &mut ws);
    let mut optimizer = Sgd::new(0.1);
    let in_flight = overlap::DistributedModel::backward(&mut model, &mut ws, &dy, grads, &comm, &mut optimizer);
    overlap::DistributedModel::step(&mut model, in_flight, &mut optimizer).unwrap();
}
