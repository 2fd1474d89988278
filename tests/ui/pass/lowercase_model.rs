//! A model whose name the user allows to be lowercase: the types named after it
//! (`netWorkspace`, ...) raise no warning of their own under `deny(warnings)`.
#![deny(warnings)]
use overlap::prelude::*;

#[allow(non_camel_case_types)]
#[distributed_model]
pub struct net {
    fc: Linear<4, 4>,
    head: Linear<4, 2>,
}

fn main() {
    let model = net::init(0);
    let _grads: netGrads = model.new_grads();
    let _workspace = netWorkspace::default();
}
