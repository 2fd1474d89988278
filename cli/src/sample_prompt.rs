//! `--start`: the text a sample continues, as nanoGPT's `sample.py` takes its `start` (a text, or
//! `FILE:path` for a file's), read as the model's tokens before anything runs.

use std::path::Path;

use overlap_runtime::text::read_text_within;
use overlap_runtime::token_table::TokenTable;
use overlap_runtime::{Error, Result};

use crate::args::TrainArgs;
use crate::sample_text::TokenText;

/// The most a prompt reads from a pipe or a device (`FILE:/dev/zero` would never end); a file
/// is read whole.
const MAX_STREAMED_PROMPT_BYTES: u64 = 1 << 20;

/// What a sample continues: its tokens, and the text printed before the drawn characters (none
/// for the default start, a newline, which the heading's own line end stands for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Prompt {
    pub(crate) tokens: Vec<usize>,
    pub(crate) shown: Option<String>,
}

/// `--start` in the tokens of `text`: characters, or the GPT-2 tokens of llm.c's tokenizer file.
pub(crate) fn prompt(args: &TrainArgs, text: &TokenText) -> Result<Prompt> {
    match text {
        TokenText::Characters(vocab) => prompt_in(args, vocab),
        TokenText::Bytes(table) => prompt_in_table(args, table),
    }
}

/// `--start` in `vocab`'s tokens (token `i` is `vocab[i]`), or, without it, nanoGPT's default:
/// a newline (the vocabulary's first character where it has none). A character the model never
/// saw is refused, naming it.
fn prompt_in(args: &TrainArgs, vocab: &[char]) -> Result<Prompt> {
    let Some(text) = start_text(args)? else {
        let newline = vocab.iter().position(|&c| c == '\n').unwrap_or(0);
        return Ok(Prompt { tokens: vec![newline], shown: None });
    };
    let token = |(at, c): (usize, char)| {
        vocab.iter().position(|&v| v == c).ok_or_else(|| {
            Error::Config(format!(
                "--start: character {} of the prompt, {c:?}, is not among the {} characters the model was trained \
                 on",
                at + 1,
                vocab.len()
            ))
        })
    };
    let tokens = text.chars().enumerate().map(token).collect::<Result<Vec<usize>>>()?;
    Ok(Prompt { tokens, shown: Some(text) })
}

/// `--start` in the tokens of llm.c's tokenizer file, GPT-2's byte-pair encoding of it
/// (`TokenTable::encode`, tiktoken's tokens; `<|endoftext|>` in it is that token), or, without
/// it, the end-of-text token, where llm.c's samples start.
fn prompt_in_table(args: &TrainArgs, table: &TokenTable) -> Result<Prompt> {
    let Some(text) = start_text(args)? else {
        return Ok(Prompt { tokens: vec![table.end_of_text()], shown: None });
    };
    let start = args.start.as_deref().unwrap_or_default();
    let tokens = table.encode(&text).map_err(|why| Error::Config(format!("--start {start:?}: {why}")))?;
    Ok(Prompt { tokens, shown: Some(text) })
}

/// The text of `--start` (`FILE:path` for a file's), or `None` without it. An empty prompt, or a
/// file that cannot be read as UTF-8 text, is refused, naming it.
fn start_text(args: &TrainArgs) -> Result<Option<String>> {
    let Some(start) = &args.start else { return Ok(None) };
    let text = match start.strip_prefix("FILE:") {
        Some(path) => read_text_within(Path::new(path), MAX_STREAMED_PROMPT_BYTES).map_err(|e| {
            Error::Config(match e {
                Error::Io { source, .. } => format!("--start {start}: {source}"),
                Error::Dataset(message) => format!("--start {start}: {message}"),
                other => format!("--start {start}: {other}"),
            })
        })?,
        None => start.clone(),
    };
    if text.is_empty() {
        return Err(Error::Config(format!(
            "--start {start:?}: an empty prompt; give at least one character to continue (without --start a sample \
             continues a newline, or the end-of-text token of --tokenizer)"
        )));
    }
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn args(start: &[&str]) -> TrainArgs {
        TrainArgs::parse_from([&["gpt", "--sample", "5"], start].concat())
    }

    #[test]
    fn a_prompt_is_its_characters_tokens_and_the_default_a_newline() {
        let vocab: Vec<char> = "\n !abo".chars().collect();
        assert_eq!(prompt_in(&args(&[]), &vocab).unwrap(), Prompt { tokens: vec![0], shown: None });
        let given = prompt_in(&args(&["--start", "a boo!"]), &vocab).unwrap();
        assert_eq!(given, Prompt { tokens: vec![3, 1, 4, 5, 5, 2], shown: Some("a boo!".into()) });
        // Without a newline, the first character (nanoGPT would fail on the missing key).
        assert_eq!(prompt_in(&args(&[]), &['x', 'y']).unwrap().tokens, [0]);
        // A prompt that looks like a flag is still a prompt.
        assert_eq!(prompt_in(&args(&["--start", "-a"]), &['-', 'a']).unwrap().tokens, [0, 1]);
    }

    #[test]
    fn a_prompt_from_a_file_reads_its_text_with_nanogpts_newlines() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prompt.txt");
        std::fs::write(&file, "ab\r\nba").unwrap();
        let start = format!("FILE:{}", file.display());
        let read = prompt_in(&args(&["--start", &start]), &['\n', 'a', 'b']).unwrap();
        assert_eq!(read, Prompt { tokens: vec![1, 2, 0, 2, 1], shown: Some("ab\nba".into()) });
    }

    #[test]
    fn an_empty_prompt_an_unreadable_file_and_an_unknown_character_are_refused_by_name() {
        let vocab = ['\n', 'a'];
        let refused = |start: &str| prompt_in(&args(&["--start", start]), &vocab).unwrap_err().to_string();
        assert!(refused("").contains("an empty prompt"), "{}", refused(""));
        assert!(refused("aXa").contains("character 2 of the prompt, 'X', is not among the 2 characters"));
        let missing = refused("FILE:/nonexistent/prompt.txt");
        assert!(missing.contains("--start FILE:/nonexistent/prompt.txt: No such file"), "{missing}");
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("b.bin");
        std::fs::write(&binary, [b'a', 0xff]).unwrap();
        let not_text = refused(&format!("FILE:{}", binary.display()));
        assert!(not_text.contains("not UTF-8 text (invalid at byte 1)"), "{not_text}");
        let endless = refused("FILE:/dev/zero");
        assert!(endless.contains("/dev/zero: more than 1 MiB from a pipe or device"), "{endless}");
        let empty = dir.path().join("empty.txt");
        std::fs::write(&empty, "").unwrap();
        assert!(refused(&format!("FILE:{}", empty.display())).contains("an empty prompt"));
    }
}
