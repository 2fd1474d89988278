//! The `prepare` command: a UTF-8 text as llm.c's token shards for `--tokens`, character
//! tokens as nanoGPT's `shakespeare_char/prepare.py` makes them, or with `--tokenizer` GPT-2's
//! tokens, tiktoken's, after the end-of-text token that starts a document in llm.c's data.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use overlap_runtime::token_shards::{check_destination, prepare_characters, prepare_tokens};
use overlap_runtime::{Error, Result};

/// Writes a text's characters as llm.c token shards: `<name>_train_NNNNNN.bin` (the first 90%)
/// and `<name>_val_NNNNNN.bin` (the rest), with `vocabulary.txt` (token i is its i-th character);
/// or, with --tokenizer, its GPT-2 tokens.
#[derive(Parser, Debug)]
#[command(name = "prepare")]
pub struct PrepareArgs {
    /// The UTF-8 text.
    #[arg(long, value_name = "FILE")]
    pub text: PathBuf,
    /// The folder to write the shards into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The shards' name before `_train` / `_val` [default: the text's file name without its
    /// extension].
    #[arg(long)]
    pub name: Option<String>,
    /// Tokens per shard: each split is cut into shards of at most N that differ by one token at
    /// most (llm.c writes 10^8 per shard), but never into a shard of one token, which holds no
    /// sample: with N = 2, a split of odd length begins with a shard of 3. At least 2, at most
    /// 2147483647 (2^31 - 1: what a shard's header can count).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100_000_000,
        value_parser = shard_tokens
    )]
    pub shard_tokens: u64,
    /// llm.c's tokenizer file (gpt2_tokenizer.bin): the shards hold the text's GPT-2 tokens, as
    /// tiktoken's `encode` gives them with `<|endoftext|>` allowed (the text's `<|endoftext|>` is
    /// that token), after an end-of-text token that starts the document, as llm.c's fineweb.py
    /// starts each; no vocabulary.txt. `gpt --tokens DIR --tokenizer FILE` trains on them and
    /// prints its samples as text.
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
}

/// `--shard-tokens`: a token and its next at least, at most what a shard's header counts.
fn shard_tokens(s: &str) -> std::result::Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if (2..=i32::MAX as u64).contains(&n) => Ok(n),
        _ => Err(format!(
            "must be a whole number from 2 (a token and its next: one sample) to {} (what a shard's header counts)",
            i32::MAX
        )),
    }
}

/// `prepare`'s `main`.
pub fn main() -> ExitCode {
    match run(&PrepareArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &PrepareArgs) -> Result<()> {
    let text = overlap_runtime::text::read_text(&args.text).map_err(|e| crate::flags::naming("--text", e))?;
    if text.is_empty() {
        return Err(Error::Dataset(format!("{}: empty: nothing to prepare", args.text.display())));
    }
    let stem = match &args.name {
        Some(name) => name.clone(),
        None => args.text.file_stem().map_or("text".into(), |s| s.to_string_lossy().into_owned()),
    };
    let shard_tokens = usize::try_from(args.shard_tokens).unwrap_or(usize::MAX);
    let prepared = match &args.tokenizer {
        None => prepare_characters(&text, &args.out, &stem, shard_tokens),
        Some(file) => {
            // Refused before a long encoding, not after it.
            check_destination(&args.out, &stem)?;
            prepare_tokens(&gpt2_tokens(&text, &args.text, file)?, &args.out, &stem, shard_tokens)
        }
    }
    .map_err(|e| match e {
        // Its message says what the text lacks, not which text.
        Error::Dataset(why) => Error::Dataset(format!("{}: {why}", args.text.display())),
        other => other,
    })?;
    let tokens = match &prepared.vocabulary {
        Some(vocabulary) => format!("({} distinct)", vocabulary.chars().count()),
        None => format!("as {} GPT-2 tokens, an end-of-text token first", prepared.train_tokens + prepared.val_tokens),
    };
    println!(
        "{}: {} characters {tokens}: {} training tokens in {} shard(s), {} held out in {} shard(s), in {}",
        args.text.display(),
        text.chars().count(),
        prepared.train_tokens,
        prepared.train.len(),
        prepared.val_tokens,
        prepared.val.len(),
        args.out.display()
    );
    if prepared.val.is_empty() {
        eprintln!(
            "note: no held-out shard: the text's last 10% is too short for one sample (a token and its next one); \
             train on these shards with --eval-every 0, or prepare a longer text"
        );
    }
    Ok(())
}

/// `text` (read from `path`) in the tokens of the tokenizer file `file`, after its end-of-text
/// token (llm.c's fineweb.py starts each document so), as the 16-bit ids of llm.c's shards.
fn gpt2_tokens(text: &str, path: &Path, file: &Path) -> Result<Vec<u16>> {
    let table = crate::sample_text::read_tokenizer(file)?;
    if table.len() > usize::from(u16::MAX) + 1 {
        return Err(Error::Config(format!(
            "--tokenizer {}: {} tokens, but llm.c's shards hold 16-bit ids (GPT-2's 50257 fit)",
            file.display(),
            table.len()
        )));
    }
    // Every id is below the table's length, which fits 16 bits.
    let mut tokens = vec![table.end_of_text() as u16];
    table
        .encode_each(text, |id| tokens.push(id as u16))
        .map_err(|why| Error::Dataset(format!("{}: as --tokenizer's tokens: {why}", path.display())))?;
    Ok(tokens)
}
