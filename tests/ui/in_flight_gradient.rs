use overlap::prelude::*;
use overlap::GradientBuckets;

#[distributed_model]
struct Model {
    fc: Linear<4, 2>,
}

fn main() {
    let comm = Communicator::single();
    let mut model = Model::new(&comm, 0).unwrap();
    let mut ws = <Model as DistributedModel>::Workspace::default();
    let grads = model.new_grads();
    let x = Matrix::zeros(1, 4);
    model.forward(&x, &mut ws);
    let dy = Matrix::zeros(1, 2);
    let mut opt = Sgd::new(0.1);
    let in_flight = model.backward(&mut ws, &dy, grads, &comm, &mut opt);
    // The buckets are being all-reduced: reading them now would race with the reduction.
    let _ = grads.buckets();
    model.step(in_flight, &mut opt).unwrap();
}
