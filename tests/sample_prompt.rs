//! `--start`: the text a `gpt` sample continues (nanoGPT's `start`), printed before what it
//! draws, from the command line or a file (`FILE:path`); a prompt the model cannot read refused
//! before training, naming the character.

mod common;

use std::path::Path;

use common::{run_example, scratch};

/// `gpt args` in `dir`: (success, stdout, stderr).
fn gpt(dir: &Path, args: &[&str]) -> (bool, String, String) {
    run_example("gpt", dir, args)
}

const TEXT: &str = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n";

#[test]
fn a_sample_continues_its_prompt_from_the_command_line_or_a_file() {
    let dir = scratch("prompt");
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(20)).unwrap();
    let train = ["--text", "t.txt", "--steps", "3", "--batch", "2", "--report", "off"];
    let (ok, out, err) = gpt(dir.path(), &[&train[..], &["--save-params", "p.st"]].concat());
    assert!(ok, "{out}{err}");
    let greedy = ["--text", "t.txt", "--steps", "0", "--init-params", "p.st", "--sample", "30", "--top-k", "1"];
    let (ok, first, err) = gpt(dir.path(), &[&greedy[..], &["--start", "To be"]].concat());
    assert!(ok, "{first}{err}");
    let heading = "sample (30 characters after a prompt of 5, temperature 0.8, top-k 1):\n";
    let continued = first.strip_prefix(heading).and_then(|s| s.strip_prefix("To be")).expect(&first);
    assert_eq!(continued.chars().count(), 31, "30 characters and a line end: {first}");
    // The same prompt from a file (`FILE:`) prints and draws the same.
    std::fs::write(dir.path().join("prompt.txt"), "To be").unwrap();
    let (ok, from_file, err) = gpt(dir.path(), &[&greedy[..], &["--start", "FILE:prompt.txt"]].concat());
    assert!(ok && from_file == first, "{from_file}{err}");
    // Longer than the 64 positions the model sees: it continues the last 64, as nanoGPT crops,
    // so greedily it draws what those 64 alone draw.
    let continuation = |prompt: &str| {
        let (ok, out, err) = gpt(dir.path(), &[&greedy[..], &["--start", prompt]].concat());
        let heading = format!("after a prompt of {}, temperature 0.8, top-k 1):\n{prompt}", prompt.chars().count());
        assert!(ok, "{out}{err}");
        out.split_once(&heading).unwrap_or_else(|| panic!("{heading:?} in {out}")).1.to_string()
    };
    let long = TEXT.repeat(2);
    let last: String = long.chars().skip(long.chars().count() - 64).collect();
    assert_eq!(continuation(&long), continuation(&last));
    // After training too, and without --start from a newline, as before.
    let (ok, out, err) = gpt(dir.path(), &[&train[..], &["--sample", "10", "--start", "that is"]].concat());
    assert!(ok && out.contains("top-k 200):\nthat is"), "{out}{err}");
    let (ok, out, err) = gpt(dir.path(), &[&train[..], &["--sample", "10"]].concat());
    assert!(ok && out.contains("sample (10 characters, temperature 0.8, top-k 200):\n"), "{out}{err}");
}

#[test]
fn a_prompt_the_model_cannot_read_is_refused_before_training() {
    let dir = scratch("prompt-refused");
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(20)).unwrap();
    let train = ["--text", "t.txt", "--steps", "3", "--batch", "2", "--report", "off", "--sample", "5"];
    let refused = |start: &str| {
        let (ok, out, err) = gpt(dir.path(), &[&train[..], &["--start", start]].concat());
        assert!(!ok && !err.contains("step      1"), "refused before step 1: {out}{err}");
        err
    };
    assert!(refused("To bé").contains("character 5 of the prompt, 'é', is not among the 23 characters"));
    assert!(refused("").contains("--start \"\": an empty prompt"));
    assert!(refused("FILE:missing.txt").contains("--start FILE:missing.txt: No such file"));
    // Without --sample it has nothing to do, and says so.
    let (ok, _, err) = gpt(dir.path(), &["--text", "t.txt", "--steps", "1", "--batch", "2", "--start", "To"]);
    assert!(ok && err.contains("note: --start has no effect without --sample"), "{err}");
}
