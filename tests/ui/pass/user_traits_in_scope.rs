//! A trait of the user's, implemented for every type and in scope beside the model, with methods
//! named as the generated code's own calls (`take`, `get_mut`, `new`, ...) takes none of them:
//! the generated code calls `Slot`'s by their full paths, not as methods.
use overlap::prelude::*;

#[allow(dead_code)]
pub trait Everywhere {
    fn take(&self) {}
    fn get_mut(&self) {}
    fn new(&self) {}
    fn wait(&self) {}
    fn clear(&self) {}
    fn launch(&self) {}
    fn views_mut(&self) {}
}

impl<T: ?Sized> Everywhere for T {}

#[distributed_model(grad_comm = powersgd(rank = 1))]
pub struct Model {
    fc: Linear<4, 8>,
    act: Gelu,
    #[bucket_boundary]
    head: Linear<8, 2>,
}

fn main() {
    let model = Model::init(0);
    let _grads = model.new_grads();
    assert_eq!(Model::SCHEDULE.buckets.len(), 2);
}
