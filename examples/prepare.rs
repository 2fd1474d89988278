//! A UTF-8 text as llm.c's token shards, for `--tokens`: character tokens (the sorted distinct
//! characters are the vocabulary, as nanoGPT's `shakespeare_char/prepare.py`), the first 90% in
//! training shards, the rest held out.
//!
//! ```text
//! cargo run --release --example prepare -- --text licenses.txt --out shards
//! target/release/examples/gpt --tokens shards --eval-every 250
//! ```

fn main() -> std::process::ExitCode {
    overlap_cli::prepare::main()
}
