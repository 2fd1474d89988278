//! # overlap
//!
//! Data-parallel training whose communication schedule is computed at compile time.
//! `#[distributed_model]` reads a struct of layers, plans gradient buckets in the order backward
//! produces the gradients, and emits straight-line code in which each bucket's asynchronous
//! all-reduce is launched right after the backward call that completes it (updating the parameters lent to it as the sums
//! arrive), and waited for where the step takes them back.
//!
//! ```
//! use overlap::prelude::*;
//!
//! #[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
//! pub struct Mlp {
//!     fc1: Linear<784, 512>,
//!     act1: Relu,
//!     fc2: Linear<512, 512>,
//!     act2: Relu,
//!     head: Linear<512, 10>,
//! }
//!
//! // Filled in the order backward produces gradients: head's, then fc2's 1 MiB weight closes
//! // the first bucket, launched right after fc2's backward; fc1's gradients are the second.
//! let schedule = Mlp::SCHEDULE;
//! assert_eq!(schedule.buckets.len(), 2);
//! assert_eq!(schedule.layers[schedule.buckets[0].launch_after].name, "fc2");
//! assert_eq!(schedule.param_name(schedule.buckets[0].params[0]), "head.bias");
//! assert_eq!(schedule.param_name(schedule.buckets[1].params[1]), "fc1.weight");
//! println!("{schedule}");
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
