//! GPT-2's tokens from llm.c's tokenizer file alone, held to tiktoken's: every text of
//! `tests/fixtures/gpt2_encoding.json` (written by `gpt2_encoding.py` beside it) encodes to the
//! tokens tiktoken's `gpt2` encoding gives it; `prepare --tokenizer` writes a text's tokens as
//! shards after an end-of-text token, as llm.c's data scripts do; and `gpt` continues a prompt
//! in them. They need GPT-2's tokenizer file, which `make gpt2-tokenizer` writes from GPT-2's
//! own `encoder.json`: `make test` runs them with it (OVERLAP_GPT2_TOKENIZER names it).

mod common;

use std::path::PathBuf;

use common::{run_example, scratch};
use overlap::token_shards::read_shard;
use overlap::token_table::TokenTable;
use sha2::{Digest, Sha256};

const NEEDS: &str = "needs GPT-2's tokenizer file in OVERLAP_GPT2_TOKENIZER (make gpt2-tokenizer; make test runs it)";

/// A fixture text and tiktoken's tokens for it.
struct Case {
    text: String,
    tokens: Vec<usize>,
}

/// The fixture's cases, after checking that `table_bytes` is the tokenizer file it was made for.
fn cases(table_bytes: &[u8]) -> Vec<Case> {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/gpt2_encoding.json")).expect("the fixture is JSON");
    let expected = fixture["tokenizer_sha256"].as_str().expect("the fixture names its tokenizer file");
    let digest: String = Sha256::digest(table_bytes).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(digest, expected, "OVERLAP_GPT2_TOKENIZER is another file than GPT-2's (make gpt2-tokenizer)");
    let cases = fixture["cases"].as_array().expect("cases");
    cases
        .iter()
        .map(|case| Case {
            text: case["text"].as_str().expect("a text").to_string(),
            tokens: case["tokens"].as_array().expect("tokens").iter().map(|t| t.as_u64().unwrap() as usize).collect(),
        })
        .collect()
}

/// GPT-2's tokenizer file: its path and its table.
fn gpt2_table() -> (PathBuf, Vec<u8>, TokenTable) {
    let path = PathBuf::from(std::env::var_os("OVERLAP_GPT2_TOKENIZER").expect(NEEDS));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let table = TokenTable::parse(&bytes).expect("GPT-2's tokenizer file reads");
    (path, bytes, table)
}

#[test]
#[ignore = "needs GPT-2's tokenizer file in OVERLAP_GPT2_TOKENIZER (make gpt2-tokenizer; make test runs it)"]
fn every_text_encodes_to_tiktokens_gpt2_tokens() {
    let (_, bytes, table) = gpt2_table();
    let cases = cases(&bytes);
    assert!(cases.len() >= 10 && cases.iter().map(|c| c.tokens.len()).sum::<usize>() > 3000);
    for case in &cases {
        assert_eq!(table.encode(&case.text).unwrap(), case.tokens, "{:?}", case.text);
    }
    // The GPT-2 ids the tests' shards are written with (`common::write_gpt2_shards`) are its tokens.
    let sentence = table.encode("The quick brown fox jumps over the lazy dog.<|endoftext|>").unwrap();
    assert_eq!(sentence, [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 50256]);
}

#[test]
#[ignore = "needs GPT-2's tokenizer file in OVERLAP_GPT2_TOKENIZER (make gpt2-tokenizer; make test runs it)"]
fn prepare_writes_a_texts_gpt2_tokens_and_gpt_continues_a_prompt_in_them() {
    let (path, bytes, table) = gpt2_table();
    let cases = cases(&bytes);
    let dir = scratch("gpt2-encoding");
    // Every case's text, one after another: the shards hold end-of-text, then their tokens.
    let text: String = cases.iter().map(|c| c.text.as_str()).collect();
    std::fs::write(dir.path().join("cases.txt"), &text).unwrap();
    let tokenizer = path.to_str().expect("a UTF-8 path");
    let prepare = ["--text", "cases.txt", "--out", "shards", "--tokenizer", tokenizer, "--shard-tokens", "1000"];
    let (ok, stdout, stderr) = run_example("prepare", dir.path(), &prepare);
    assert!(ok, "{stdout}{stderr}");
    // The text as `prepare` reads it: with Python's newlines, as nanoGPT and llm.c read theirs.
    let read = overlap::text::read_text(&dir.path().join("cases.txt")).unwrap();
    assert!(read.len() < text.len() && !read.contains('\r'), "the cases hold `\r`s: newlines are read as Python's");
    let expected: Vec<u16> =
        std::iter::once(table.end_of_text()).chain(table.encode(&read).unwrap()).map(|t| t as u16).collect();
    let (train, val) = overlap::token_shards::locate(&dir.path().join("shards")).unwrap();
    assert!(train.len() > 1 && !val.is_empty(), "{train:?} {val:?}");
    let written: Vec<u16> = train.iter().chain(&val).flat_map(|shard| read_shard(shard).unwrap()).collect();
    assert_eq!(written, expected);
    assert!(!dir.path().join("shards/vocabulary.txt").exists(), "GPT-2's ids are no characters");
    assert!(stdout.contains(&format!("as {} GPT-2 tokens, an end-of-text token first", expected.len())), "{stdout}");

    // A model trained on them continues a prompt of tiktoken's tokens, printing it first.
    let hello = cases.iter().find(|c| c.text == "Hello world").expect("the fixture's `Hello world`");
    let flags = "--tokens shards --vocab 50304 --context 16 --batch 2 --steps 2 --report off --eval-every 0 --sample 3";
    let prompt = ["--top-k", "1", "--tokenizer", tokenizer, "--start", "Hello world"];
    let gpt: Vec<&str> = flags.split_whitespace().chain(prompt).collect();
    let (ok, stdout, stderr) = run_example("gpt", dir.path(), &gpt);
    assert!(ok, "{stdout}{stderr}");
    let heading =
        format!("sample (3 tokens after a prompt of {}, temperature 0.8, top-k 1):\nHello world", hello.tokens.len());
    assert!(stdout.contains(&heading), "{stdout}");
}
