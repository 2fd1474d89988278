//! Runtime of `overlap`: tensors, layers, losses, optimizers, communicators, and the contract
//! (`DistributedModel`) that `#[distributed_model]` implements.

pub mod gemm;
pub mod init;
pub mod layer;
pub mod loss;
pub mod optim;
pub mod tensor;

pub use init::InitRng;
pub use layer::{Gelu, Layer, LayerNorm, Linear, ParamDef, Relu, Sigmoid, Tanh, Width};
pub use loss::{CrossEntropyLoss, MseLoss};
pub use optim::{AdamW, Optimizer, Sgd};
pub use tensor::Matrix;
