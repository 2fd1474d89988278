//! The layer contract between the `#[distributed_model]` macro and the runtime (`contract`), and
//! the built-in layers.
//!
//! The macro plans buckets from the widths and parameter shapes it reads in the struct; it then
//! asserts at compile time that they equal the `Layer` constants, so a layer can never run with a
//! different layout from the one the schedule was planned for.

mod activation;
mod attention;
mod context;
mod contract;
mod dropout;
mod dropout_draw;
mod embedding;
mod exp;
mod gradient_check;
mod init_normal;
mod lanes;
mod layer_norm;
mod layout_check;
mod linear;
mod scratch;
mod tanh;
mod tied_head;
mod weight_bias;

pub use activation::{Gelu, Relu, Sigmoid, Tanh};
pub use attention::{AttentionSaved, CausalSelfAttention};
pub use context::StepContext;
pub(crate) use contract::assert_not_lent;
pub use contract::{DeviceOp, Layer, ParamDef};
pub use dropout::Dropout;
pub use dropout_draw::DropoutDraw;
pub use embedding::{check_token_ids, Embedding, PositionEmbedding};
pub use gradient_check::{GradientCheck, GradientMismatch};
pub use init_normal::{init_normal, init_normal_params};
pub use layer_norm::LayerNorm;
pub use layout_check::{layer_matches, layout_mismatch, LayoutMismatch};
pub use linear::Linear;
pub use overlap_plan::{ReadyOrder, Width};
pub use tied_head::{TiedHead, TiedLayer};

#[cfg(test)]
mod gradcheck;
