//! `--tokenizer FILE`: a `gpt` sample from GPT-2 token shards prints through llm.c's tokenizer
//! file, as the text its token ids stand for, from its end-of-text token (as llm.c's samples
//! start) or from a `--start` it encodes; a table, a prompt or a model that cannot serve is
//! refused before step 1, by name. (`tests/gpt2_encoding.rs` holds the encoding to tiktoken's.)

mod common;

use std::path::Path;

use common::{run_example, run_example_merged, scratch, write_gpt2_shards};
use overlap::token_table::write_table;

/// GPT-2's tokens, the last of them `<|endoftext|>`.
const GPT2_TOKENS: usize = 50257;

/// Writes a tokenizer file of GPT-2's size whose token `i` is `piece(i)`.
fn write_tokenizer(path: &Path, piece: impl Fn(usize) -> Vec<u8>) {
    let pieces: Vec<Vec<u8>> = (0..GPT2_TOKENS).map(piece).collect();
    let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
    std::fs::write(path, write_table(&refs, GPT2_TOKENS - 1).unwrap()).unwrap();
}

/// Token `i` as bytes that split a character across tokens: the second byte of an `é`, the id,
/// and the `é`'s first byte. Drawn one after another, the tokens print `é` between their ids,
/// with U+FFFD for the first token's lone second byte and the last one's lone first byte.
fn splitting(token: usize) -> Vec<u8> {
    [&[0xa9][..], token.to_string().as_bytes(), &[0xc3]].concat()
}

/// What a sample of `tokens` printed to stdout after its heading.
fn sample_text(stdout: &str, tokens: usize) -> String {
    let heading = format!("sample ({tokens} tokens, temperature 0.8, top-k 1):\n");
    let text = stdout.split(&heading).nth(1).unwrap_or_else(|| panic!("no sample heading in {stdout}"));
    text.strip_suffix('\n').expect("a sample ends its line").to_string()
}

#[test]
fn a_greedy_sample_prints_gpt2_tokens_through_the_tokenizer_file() {
    let dir = scratch("gpt2-tokenizer");
    write_gpt2_shards(dir.path());
    write_tokenizer(&dir.path().join("numbered.bin"), |token| format!("<{token}>").into_bytes());
    write_tokenizer(&dir.path().join("splitting.bin"), splitting);
    let data = ["--tokens", "gpt2", "--vocab", "50304", "--context", "16", "--batch", "2", "--report", "off"];
    let greedy = ["--sample", "12", "--top-k", "1", "--tokenizer"];
    let trained = [&data[..], &["--steps", "2", "--save-params", "p.st"], &greedy, &["numbered.bin"]].concat();
    let (ok, stdout, stderr) = run_example("gpt", dir.path(), &trained);
    assert!(ok, "{stdout}{stderr}");
    // Token i prints as `<i>`: the ids drawn can be read back, twelve of them, each one of GPT-2's.
    let numbered = sample_text(&stdout, 12);
    let ids: Vec<usize> = numbered
        .strip_prefix('<')
        .and_then(|s| s.strip_suffix('>'))
        .unwrap_or_else(|| panic!("not numbered tokens: {numbered}"))
        .split("><")
        .map(|id| id.parse().unwrap_or_else(|_| panic!("not a token id: {id} in {numbered}")))
        .collect();
    assert!(ids.len() == 12 && ids.iter().all(|&id| id < GPT2_TOKENS), "{ids:?}");
    // From the saved parameters alone, the same draws; through bytes that split characters between
    // tokens, the UTF-8 decoding of all their bytes (U+FFFD where they do not form a character).
    let alone = |table: &str| {
        let args = [&["--steps", "0", "--init-params", "p.st"][..], &greedy, &[table]].concat();
        let (ok, stdout, stderr) = run_example("gpt", dir.path(), &args);
        assert!(ok, "{stdout}{stderr}");
        sample_text(&stdout, 12)
    };
    assert_eq!(alone("numbered.bin"), numbered);
    let bytes: Vec<u8> = ids.iter().flat_map(|&id| splitting(id)).collect();
    assert_eq!(alone("splitting.bin"), String::from_utf8_lossy(&bytes));

    // What cannot serve is refused before step 1, naming the value.
    std::fs::write(dir.path().join("small.bin"), write_table(&[b"a", b"b", b"c"], 2).unwrap()).unwrap();
    std::fs::create_dir(dir.path().join("characters")).unwrap();
    overlap::token_shards::write_shard(&dir.path().join("characters/c_train.bin"), &[1; 400]).unwrap();
    // Shards whose ids stand for characters, listed beside them, and a file that records them.
    std::fs::create_dir(dir.path().join("listed")).unwrap();
    overlap::token_shards::write_shard(&dir.path().join("listed/l_train.bin"), &[1; 400]).unwrap();
    std::fs::write(dir.path().join("listed/vocabulary.txt"), "ab").unwrap();
    let listed = [
        "--tokens",
        "listed",
        "--context",
        "16",
        "--steps",
        "1",
        "--batch",
        "2",
        "--report",
        "off",
        "--eval-every",
        "0",
    ];
    let (ok, text) = run_example_merged("gpt", dir.path(), &[&listed[..], &["--save-params", "chars.st"]].concat());
    assert!(ok, "{text}");
    let one_step = [&data[..], &["--steps", "1", "--sample", "5"]].concat();
    let characters = ["--tokens", "characters", "--context", "16", "--steps", "1", "--sample", "5", "--tokenizer"];
    for (args, expected) in [
        (
            [&one_step[..], &["--tokenizer", "numbered.bin", "--start", "The"]].concat(),
            "--start \"The\": byte 0x54 of \"The\" is no token of the tokenizer file",
        ),
        (
            [&one_step[..], &["--tokenizer", "small.bin"]].concat(),
            "--tokenizer small.bin: 3 tokens, but gpt2/tiny_train.bin holds token id 50256: it is not these shards' \
             tokenizer",
        ),
        (
            [&one_step[..], &["--tokenizer", "gpt2/tiny_train.bin"]].concat(),
            "--tokenizer gpt2/tiny_train.bin: a token shard (magic 20240520), not a tokenizer file",
        ),
        ([&one_step[..], &["--tokenizer", "missing.bin"]].concat(), "--tokenizer missing.bin: No such file"),
        (
            [&characters[..], &["numbered.bin"]].concat(),
            "--tokenizer numbered.bin: 50257 tokens, but Gpt reads and predicts 96 in this program's shape",
        ),
        (
            ["--text", "numbered.bin", "--steps", "1", "--sample", "5", "--tokenizer", "numbered.bin"].to_vec(),
            "cannot be used with",
        ),
        // Ids that stand for characters are not printed as GPT-2's bytes: after training, and from a
        // file alone, whether the shards list the characters or the file records them.
        (
            [&listed[..], &["--sample", "5", "--tokenizer", "small.bin"]].concat(),
            "--tokenizer small.bin: these token ids are characters, as listed/vocabulary.txt lists them",
        ),
        (
            [
                "--steps",
                "0",
                "--init-params",
                "p.st",
                "--tokens",
                "listed",
                "--sample",
                "5",
                "--tokenizer",
                "numbered.bin",
            ]
            .to_vec(),
            "as listed/vocabulary.txt lists them",
        ),
        (
            ["--steps", "0", "--init-params", "chars.st", "--sample", "5", "--tokenizer", "small.bin"].to_vec(),
            "these token ids are characters, as the vocabulary --init-params records lists them",
        ),
        (
            [&characters[..], &["small.bin", "--init-params", "chars.st", "--batch", "2", "--eval-every", "0"]]
                .concat(),
            "these token ids are characters, as the vocabulary --init-params records lists them",
        ),
    ] {
        let (ok, text) = run_example_merged("gpt", dir.path(), &args);
        assert!(!ok && text.contains(expected), "{args:?}: {text}");
        assert!(!text.contains("step      1"), "refused before step 1: {text}");
    }
}

#[test]
fn a_prompt_is_encoded_by_the_tokenizer_file_and_continued() {
    let dir = scratch("gpt2-prompt");
    write_gpt2_shards(dir.path());
    // Bytes first (token b is byte b), `he` joined, then numbered tokens: "The" is T|he, 2 tokens.
    let joined = |token: usize| match token {
        0..=255 => vec![token as u8],
        256 => b"he".to_vec(),
        _ => format!("<{token}>").into_bytes(),
    };
    write_tokenizer(&dir.path().join("joined.bin"), joined);
    let flags = "--tokens gpt2 --vocab 50304 --context 16 --batch 2 --report off --steps 1 --sample 4 --top-k 1";
    let args: Vec<&str> = flags.split_whitespace().chain(["--tokenizer", "joined.bin", "--start", "The"]).collect();
    let (ok, stdout, stderr) = run_example("gpt", dir.path(), &args);
    assert!(ok, "{stdout}{stderr}");
    let heading = "sample (4 tokens after a prompt of 2, temperature 0.8, top-k 1):\nThe";
    assert!(stdout.contains(heading), "{stdout}");
}
