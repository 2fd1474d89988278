//! `examples/mlp_powersgd.rs` in a binary of its own that enables fault injection, as
//! `fault-mlp` is `examples/mlp.rs`.

// The example's own `main` is the same call; this binary's is below.
#[allow(dead_code)]
#[path = "../../../examples/mlp_powersgd.rs"]
mod example;

fn main() -> std::process::ExitCode {
    overlap_runtime::fault::enable();
    overlap_cli::main::<example::Mlp>()
}
