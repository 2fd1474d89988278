//! Runtime of `overlap`: tensors, layers, losses, optimizers, communicators, and the contract
//! (`DistributedModel`) that `#[distributed_model]` implements.

#![warn(missing_docs)]

pub(crate) mod backend;
pub mod checkpoint;
pub mod comm;
pub mod config;
pub(crate) mod content_hash;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod data;
pub mod device;
pub mod error;
#[doc(hidden)] // test hooks, active only with the `fault-injection` feature
pub mod fault;
pub(crate) mod figures;
pub(crate) mod host;
pub mod idx;
pub mod init;
pub mod layer;
pub mod loss;
pub mod memory;
pub mod model;
pub mod observe;
pub mod optim;
pub mod params_file;
pub(crate) mod process;
pub mod profile;
pub mod program;
pub mod sample;
pub mod tensor;
pub(crate) mod tensor_file;
#[cfg(test)]
mod test_children;
pub mod text;
pub mod token_shards;
pub mod token_table;
pub mod trace;
pub mod train;
pub mod training_data;

pub use comm::{
    BucketMember, CommConfig, CommMode, Communicator, GradBucket, InFlight, LowRankP, LowRankQ, ParamVecs, Transport,
    WireFormat,
};
pub use data::{Batch, Dataset, SyntheticClassification};
pub use error::{Error, ParseError, Result};
/// The products the built-in layers run, on the same BLAS and threads, for layers of one's own.
pub use host::gemm::{gemm, gemm_into, MatMut, MatRef};
pub use init::InitRng;
pub use layer::{
    layer_matches, layout_mismatch, CausalSelfAttention, DeviceOp, Dropout, DropoutDraw, Embedding, Gelu,
    GradientCheck, GradientMismatch, Layer, LayerNorm, Linear, ParamDef, PositionEmbedding, ReadyOrder, Relu, Sigmoid,
    StepContext, Tanh, TiedHead, TiedLayer, Width,
};
pub use loss::{CrossEntropyLoss, DeviceLoss, Loss, MseLoss};
pub use model::{grad_scale, DistributedModel, GradientBuckets};
pub use optim::{AdamW, DecayOn, LrSchedule, Optimizer, OptimizerState, Sgd};
pub use overlap_plan as plan;
pub use tensor::Matrix;
pub use train::{
    Device, DropoutConfig, ObserveConfig, OptimizerConfig, OptimizerKind, Progress, ReportFormat, SaveConfig,
    TrainConfig, TrainSummary, Trainer, ValidationConfig,
};

/// What the command line (`overlap-cli`) and the project's own tests use of the process and
/// host infrastructure, which is otherwise internal; not a public API.
#[doc(hidden)]
pub mod command_line {
    pub use crate::host::blas_core;
    pub use crate::host::threads::use_for_products;
    pub use crate::process::console;
}
