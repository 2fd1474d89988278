//! The command line of overlap's training binaries: flags in, a `Trainer` out. Every example's
//! `main` is one call:
//!
//! ```text
//! fn main() -> std::process::ExitCode {
//!     overlap_cli::main::<Mlp>()
//! }
//! ```
//!
//! It trains on the synthetic classification set, or on MNIST-format files (`--data`), with
//! softmax cross-entropy; a program with its own data or loss uses the `Trainer` directly.

#![warn(missing_docs)]

pub mod args;
mod comm_bench;
mod datasets;
pub mod example_defaults;
mod flags;
pub mod model_shapes;
mod outputs;
mod parse_failure;
pub mod prepare;
mod progress;
mod run;
mod sample_prompt;
mod sample_text;
mod sampling;
mod start;
mod unused_flags;

use std::process::ExitCode;

use clap::CommandFactory;
use overlap_runtime::DistributedModel;

pub use args::TrainArgs;
pub use example_defaults::ExampleDefaults;
pub use model_shapes::{main_with_shapes, ModelShape, ModelShapes};
pub use progress::Bar;
pub use run::train;
use run::{fit_blas_kernels, run_main};

/// Parses the command line, trains `M`, and turns any error into a message and a non-zero exit
/// status on the rank that hit it.
pub fn main<M: DistributedModel>() -> ExitCode {
    fit_blas_kernels();
    let command = args::for_model::<M>(TrainArgs::command()).about(args::about::<M>()).long_about(None);
    let matches = args::matches(command, std::env::args_os()).unwrap_or_else(|e| parse_failure::exit(e));
    run_main::<M>(TrainArgs::from_matches(&matches).unwrap_or_else(|e| parse_failure::exit(e)))
}

/// `main`, starting from an example's own configuration (nanoGPT's, for `gpt`): its flags'
/// defaults, shown by `--help`, and its description; a flag given on the command line still wins.
pub fn main_with_defaults<M: DistributedModel>(defaults: &ExampleDefaults) -> ExitCode {
    fit_blas_kernels();
    run_main::<M>(example_defaults::parse::<M>(defaults, std::env::args_os()))
}
