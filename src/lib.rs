//! # overlap
//!
//! Data-parallel training whose communication schedule is computed at compile time.
//! `#[distributed_model]` reads a struct of layers, plans reverse-order gradient buckets, and
//! emits straight-line code in which each bucket's asynchronous all-reduce is launched right
//! after the backward call that completes it, and waited for right before its update.
//!
//! ```ignore
//! use overlap::prelude::*;
//!
//! #[distributed_model(bucket_cap_mb = 25, first_bucket_mb = 1)]
//! pub struct Mlp {
//!     fc1: Linear<784, 2048>,
//!     act1: Relu,
//!     head: Linear<2048, 10>,
//! }
//! ```

pub use overlap_macros::distributed_model;
pub use overlap_runtime::*;

/// The macro, the built-in layers, losses, optimizers and the model trait.
pub mod prelude {
    pub use overlap_macros::distributed_model;
    pub use overlap_runtime::{
        AdamW, CommMode, Communicator, CrossEntropyLoss, DistributedModel, Gelu, GradientBuckets, Layer, LayerNorm,
        Linear, Matrix, MseLoss, Optimizer, Relu, Sgd, Sigmoid, Tanh,
    };
}

/// Used by the code `#[distributed_model]` emits; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use overlap_runtime::layer_matches;
    pub use std::borrow::Cow;

    use overlap_runtime::plan::Schedule;
    use overlap_runtime::{GradBucket, GradientBuckets};

    /// Stands in for the generated types of a model the macro rejected; never constructed.
    pub enum InvalidModel {}

    impl GradientBuckets for InvalidModel {
        fn buckets(&self) -> Vec<&GradBucket> {
            match *self {}
        }
        fn micro_steps(&self) -> usize {
            match *self {}
        }
    }

    /// The schedule of a model the macro rejected (its errors stop the build first).
    pub const fn invalid_schedule(model: &'static str) -> Schedule {
        Schedule {
            model: Cow::Borrowed(model),
            first_bucket_bytes: 0,
            bucket_cap_bytes: 0,
            layers: Cow::Borrowed(&[]),
            buckets: Cow::Borrowed(&[]),
        }
    }
}
