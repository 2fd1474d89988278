//! `examples/mlp.rs` in a binary of its own that enables fault injection: the example's model,
//! and its `main` (one call into the command line), as they are.

// The example's own `main` is the same call; this binary's is below.
#[allow(dead_code)]
#[path = "../../../examples/mlp.rs"]
mod example;

fn main() -> std::process::ExitCode {
    overlap_runtime::fault::enable();
    overlap_cli::main::<example::Mlp>()
}
