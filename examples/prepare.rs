//! A UTF-8 text as llm.c's token shards, for `--tokens`: character tokens (the sorted distinct
//! characters are the vocabulary, as nanoGPT's `shakespeare_char/prepare.py`), or with
//! `--tokenizer` GPT-2's tokens (tiktoken's, through llm.c's tokenizer file), the first 90% in
//! training shards, the rest held out.
//!
//! ```text
//! cargo run --release --example prepare -- --text licenses.txt --out shards
//! target/release/examples/gpt --tokens shards --eval-every 250
//! target/release/examples/prepare --text licenses.txt --out gpt2 --tokenizer .tools/gpt2/gpt2_tokenizer.bin
//! target/release/examples/gpt --tokens gpt2 --vocab 50304 --tokenizer .tools/gpt2/gpt2_tokenizer.bin --sample 100
//! ```

fn main() -> std::process::ExitCode {
    overlap_cli::prepare::main()
}
