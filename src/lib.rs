//! # overlap
//!
//! Data-parallel training whose communication schedule is computed at compile time.
//! `#[distributed_model]` reads a struct of layers, plans gradient buckets in the order backward
//! produces the gradients, and emits straight-line code in which each bucket's asynchronous
//! all-reduce is launched right after the backward call that completes it (updating the
//! parameters lent to it as the sums arrive), and waited for where the step takes them back.
//!
//! A model, a loss and a dataset of your own, trained by the `Trainer` (run it under
//! `mpirun -n 4` and every rank trains a quarter of each global batch):
//!
//! ```
//! use overlap::prelude::*;
//!
//! #[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
//! pub struct Regressor {
//!     fc1: Linear<4, 64>,
//!     act1: Gelu,
//!     fc2: Linear<64, 64>,
//!     act2: Tanh,
//!     head: Linear<64, 1>,
//! }
//!
//! /// Mean absolute error.
//! struct L1;
//!
//! impl Loss for L1 {
//!     fn loss_and_gradient(&self, out: &Matrix, batch: &Batch, grad: &mut Matrix) -> overlap::Result<f32> {
//!         grad.resize(out.rows(), out.cols());
//!         let n = out.as_slice().len() as f32;
//!         let pairs = out.as_slice().iter().zip(batch.targets.as_slice());
//!         let mut total = 0.0;
//!         for (g, (o, t)) in grad.as_mut_slice().iter_mut().zip(pairs) {
//!             total += (o - t).abs();
//!             *g = (o - t).signum() / n;
//!         }
//!         Ok(total / n)
//!     }
//! }
//!
//! /// Sample `i` is `x = (sin i, cos i, sin 2i, cos 2i)` and `y = x0 * x1 + x2`.
//! struct Curve;
//!
//! impl Dataset for Curve {
//!     fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
//!         batch.inputs.resize(rows, 4);
//!         batch.targets.resize(rows, 1);
//!         for r in 0..rows {
//!             let i = (first + r as u64) as f32;
//!             let x = [i.sin(), i.cos(), (2.0 * i).sin(), (2.0 * i).cos()];
//!             batch.inputs.row_mut(r).copy_from_slice(&x);
//!             batch.targets.row_mut(r)[0] = x[0] * x[1] + x[2];
//!         }
//!         Ok(())
//!     }
//!     fn features(&self) -> usize {
//!         4
//!     }
//! }
//!
//! let comm = Communicator::from_env()?; // one process here; MPI under mpirun
//! let mut model = Regressor::new(&comm, 0)?;
//! let summary = Trainer::new(&comm)
//!     .optimizer(OptimizerConfig::adamw(0.01))
//!     .steps(40)
//!     .batch(32)
//!     .report(ReportFormat::Off, None)
//!     .fit(&mut model, &mut Curve, &L1)?;
//! assert!(summary.final_loss < summary.first_loss);
//!
//! # Ok::<(), overlap::Error>(())
//! ```
//!
//! The compiled plan, as data (what `--print-schedule` prints):
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

#![warn(missing_docs)]

pub use overlap_macros::distributed_model;

// The model contract, the layers, and what a layer of one's own implements.
/// Matrix products over strided views (`C = alpha·A·B + beta·C`; `MatRef::t` transposes without
/// copying), on the BLAS and threads the built-in layers use, for layers of one's own.
pub use overlap_runtime::{gemm, gemm_into, MatMut, MatRef};
pub use overlap_runtime::{
    CausalSelfAttention, DeviceOp, DistributedModel, Dropout, DropoutDraw, Embedding, Gelu, GradientBuckets, InitRng,
    Layer, LayerNorm, Linear, Matrix, ParamDef, PositionEmbedding, ReadyOrder, Relu, Sigmoid, StepContext, Tanh,
    TiedHead, TiedLayer, Width,
};
/// A layer's `backward` against finite differences of its `forward`, for layers of one's own.
pub use overlap_runtime::{GradientCheck, GradientMismatch};
// Training: the loop, its settings, losses, data and optimizers.
pub use overlap_runtime::{
    AdamW, Batch, CrossEntropyLoss, Dataset, DecayOn, Device, DeviceLoss, DropoutConfig, Loss, LrSchedule, MseLoss,
    ObserveConfig, Optimizer, OptimizerConfig, OptimizerKind, OptimizerState, Progress, ReportFormat, SaveConfig, Sgd,
    SyntheticClassification, TrainConfig, TrainSummary, Trainer, ValidationConfig,
};
// The ranks and their gradient buckets (`GradientBuckets::buckets` gives them between steps).
/// A cluster that `Trainer::simulate` replays the step on (`"world=64,link=ib-ndr".parse()`).
pub use overlap_runtime::profile::Cluster;
pub use overlap_runtime::{CommConfig, CommMode, Communicator, GradBucket, Transport, WireFormat};
pub use overlap_runtime::{Error, ParseError, Result};

/// How long a failing rank waits for the others to fail alike before ending the job
/// (`Communicator::abort_job`).
pub use overlap_runtime::comm::ABORT_GRACE;

/// Checkpoints: a run's parameters, optimizer state and position, saved and loaded.
pub use overlap_runtime::checkpoint;
/// The GPU backend (feature `cuda`).
#[cfg(feature = "cuda")]
pub use overlap_runtime::cuda;
/// MNIST-format (IDX) files as a `Dataset`.
pub use overlap_runtime::idx;
/// What a rank's training needs in memory: the report's estimate and the preflight's.
pub use overlap_runtime::memory;
/// Parameters alone, as a safetensors file named like PyTorch's `state_dict`.
pub use overlap_runtime::params_file;
/// The compiled plan as data: `Schedule`, buckets, layers, the cost model and simulator.
pub use overlap_runtime::plan;
/// The device contract of the program `#[distributed_model]` emits (`Program`): where tensors
/// live (`Storage`: `Host`, or a GPU), and what runs the layers, launches and wait points.
pub use overlap_runtime::program;
/// Text from a trained language model (`generate`, as nanoGPT's).
pub use overlap_runtime::sample;
/// A text's characters as a `Dataset` (`CharText`).
pub use overlap_runtime::text;
/// llm.c's token shards as a `Dataset`, and writing them (`prepare_characters`).
pub use overlap_runtime::token_shards;
/// llm.c's tokenizer file (`TokenTable`): GPT-2's token ids as the bytes they stand for.
pub use overlap_runtime::token_table;
/// Spans, the overlap report, the Chrome trace and the timeline.
pub use overlap_runtime::trace;

/// The macro, the built-in layers, losses and optimizers, the model trait, the `Trainer` and what
/// a dataset, a loss or a layer of one's own is written with. (A name of your own beside
/// `use overlap::prelude::*` takes precedence over the prelude's.)
pub mod prelude {
    pub use overlap_macros::distributed_model;
    pub use overlap_runtime::{
        AdamW, CausalSelfAttention, CommConfig, CommMode, Communicator, CrossEntropyLoss, Dataset, DistributedModel,
        Dropout, Embedding, Gelu, GradientBuckets, Layer, LayerNorm, Linear, Loss, Matrix, MseLoss, Optimizer,
        OptimizerConfig, PositionEmbedding, Relu, Sgd, Sigmoid, StepContext, Tanh, TiedHead, TrainSummary, Trainer,
    };
    // What a dataset or a loss of one's own fills and reads, and the `Trainer`'s settings.
    pub use overlap_runtime::{
        Batch, Device, ReportFormat, SaveConfig, SyntheticClassification, TrainConfig, ValidationConfig,
    };
    // What a layer of one's own declares (`Layer::PARAMS`, its widths, ready order and device op).
    pub use overlap_runtime::{DeviceOp, GradientCheck, InitRng, ParamDef, ReadyOrder, Width};
}

/// Used by the code `#[distributed_model]` emits; not a public API. What only generated code
/// names lives here rather than beside what users call: the in-flight stages of a bucket, the
/// lent parameters, the averaging factor and the layout check.
#[doc(hidden)]
pub mod __private {
    pub use overlap_runtime::layer::LayoutMismatch;
    pub use overlap_runtime::layer::{init_normal, init_normal_params};
    pub use overlap_runtime::{
        grad_scale, layer_matches, layout_mismatch, BucketMember, InFlight, LowRankP, LowRankQ, ParamVecs,
    };
    /// The layout check's `assert!`, named by an absolute path: an import of it beside the
    /// model is left unresolved when a derive above the attribute fails, adding an error of its
    /// own.
    pub use std::assert;
    pub use std::borrow::Cow;

    use overlap_runtime::plan::{BucketLimits, Schedule};
    use overlap_runtime::{GradBucket, GradientBuckets};

    /// Stands in for the generated types of a model the macro rejected; never constructed.
    pub enum InvalidModel {}

    impl GradientBuckets for InvalidModel {
        fn buckets(&self) -> Vec<&GradBucket> {
            match *self {}
        }
        fn buckets_mut(&mut self) -> Vec<&mut GradBucket> {
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
            limits: BucketLimits::Unlimited,
            layers: Cow::Borrowed(&[]),
            buckets: Cow::Borrowed(&[]),
            shard_optimizer: false,
            gathers: Cow::Borrowed(&[]),
        }
    }
}
