//! llm.c's token shards (`--tokens`): the `prepare` example writes a text's characters as shards,
//! the `gpt` example trains on them alike on one process and on two ranks, holds out their `val`
//! shard, and every shard or setting that does not fit is refused before step 1 with its value.

mod common;

use common::{example, run_example_merged as run, scratch, write_gpt2_shards};

const TEXT: &str = "Whether 'tis nobler in the mind to suffer the slings and arrows of outrageous fortune, ";

#[test]
fn prepared_shards_train_the_gpt_example_alike_on_one_and_two_ranks() {
    let dir = scratch("tokens");
    std::fs::write(dir.path().join("play.txt"), TEXT.repeat(30)).unwrap();
    let (ok, text) = run("prepare", dir.path(), &["--text", "play.txt", "--out", "shards", "--shard-tokens", "1000"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("2610 characters (21 distinct): 2349 training tokens in 3 shard(s), 261 held out in 1 shard(s)"),
        "{text}"
    );
    // A text too short to shard is named.
    std::fs::write(dir.path().join("one.txt"), "x").unwrap();
    let (ok, text) = run("prepare", dir.path(), &["--text", "one.txt", "--out", "short"]);
    assert!(!ok && text.contains("one.txt: 1 character(s)"), "{text}");
    assert!(!text.contains("note: no held-out shard"), "{text}");
    // One whose last 10% holds no sample is prepared without a held-out shard, which is said.
    std::fs::write(dir.path().join("ten.txt"), "abcdefghij").unwrap();
    let (ok, text) = run("prepare", dir.path(), &["--text", "ten.txt", "--out", "ten"]);
    assert!(ok && text.contains("9 training tokens in 1 shard(s), 0 held out in 0 shard(s)"), "{text}");
    assert!(text.contains("note: no held-out shard: the text's last 10% is too short for one sample"), "{text}");
    let common = ["--tokens", "shards", "--context", "16", "--steps", "3", "--report", "off", "--eval-every", "3"];
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &["--batch", "4", "--save-params", "one.st"]].concat());
    assert!(ok, "{text}");
    assert!(text.contains("step      3  validation loss"), "{text}");
    let vocabulary = overlap::params_file::load_vocabulary(&dir.path().join("one.st")).unwrap().unwrap();
    assert_eq!(vocabulary, std::fs::read_to_string(dir.path().join("shards/vocabulary.txt")).unwrap());
    assert!(!text.contains("note: --tokens"), "{text}");
    // A held-out shard trained on, and shards that skip a number, are noted (and still read).
    let val = ["--tokens", "shards/play_val_000000.bin", "--context", "16", "--steps", "1", "--report", "off"];
    let (ok, text) = run("gpt", dir.path(), &[&val[..], &["--batch", "4", "--eval-every", "0"]].concat());
    assert!(ok && text.contains("note: --tokens shards/play_val_000000.bin: named as a held-out shard"), "{text}");
    std::fs::create_dir(dir.path().join("gap")).unwrap();
    for name in ["vocabulary.txt", "play_train_000000.bin", "play_train_000002.bin"] {
        std::fs::copy(dir.path().join("shards").join(name), dir.path().join("gap").join(name)).unwrap();
    }
    let gap = ["--tokens", "gap", "--context", "16", "--steps", "1", "--report", "off", "--eval-every", "0"];
    let (ok, text) = run("gpt", dir.path(), &[&gap[..], &["--batch", "4"]].concat());
    let says = "note: --tokens gap: the training shards skip number 000001 (between 000000 and 000002)";
    assert!(ok && text.contains(says), "{text}");
    if common::mpirun_available() {
        let (exe, wdir) = (example("gpt"), dir.path().to_str().unwrap());
        let ranks = ["--wdir", wdir, "-n", "2", exe.to_str().unwrap()];
        common::mpirun_ok(&[&ranks[..], &common, &["--batch", "2", "--save-params", "two.st"]].concat());
        let (one, two) = (
            common::load_sorted_params(&dir.path().join("one.st")),
            common::load_sorted_params(&dir.path().join("two.st")),
        );
        // As in tests/text_data.rs: `c_attn.bias`'s key part takes AdamW steps made from rounding.
        let diff = common::max_relative_difference(&one, &two);
        assert!(diff < 1e-3, "two ranks of two windows each read what one rank of four reads: {diff:e}");
    }
}

/// `--sample` prints prepared shards' tokens as their vocabulary's characters, after training or
/// from the parameters a run saved (which record that vocabulary), with no text needed.
#[test]
fn prepared_shards_sample_in_their_own_characters() {
    let dir = scratch("tokens-sample");
    std::fs::write(dir.path().join("play.txt"), TEXT.repeat(30)).unwrap();
    let (ok, text) = run("prepare", dir.path(), &["--text", "play.txt", "--out", "shards"]);
    assert!(ok, "{text}");
    let common = ["--context", "16", "--sample", "60"];
    let trained = [
        "--tokens",
        "shards",
        "--steps",
        "3",
        "--batch",
        "4",
        "--report",
        "off",
        "--eval-every",
        "0",
        "--save-params",
        "p.st",
    ];
    let (ok, after_training) = run("gpt", dir.path(), &[&common[..], &trained].concat());
    assert!(ok, "{after_training}");
    // The 60 characters after the sample's header (notes on stderr follow stdout here).
    let sample = |text: &str| text.split_once("top-k 200):\n").map(|(_, s)| s.chars().take(60).collect::<String>());
    let drawn = sample(&after_training).unwrap_or_default();
    assert_eq!(drawn.chars().count(), 60, "{after_training}");
    assert!(drawn.chars().all(|c| TEXT.contains(c) || c == '\n'), "the text's characters only:\n{drawn}");
    // The saved parameters record the vocabulary: the same sample from them, with no --text.
    let (ok, from_file) = run("gpt", dir.path(), &[&common[..], &["--steps", "0", "--init-params", "p.st"]].concat());
    assert!(ok, "{from_file}");
    assert_eq!(sample(&from_file).as_ref(), Some(&drawn));
    // Shards without a vocabulary.txt print in the one --init-params records.
    std::fs::create_dir(dir.path().join("bare")).unwrap();
    for entry in std::fs::read_dir(dir.path().join("shards")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "bin") {
            std::fs::copy(&path, dir.path().join("bare").join(path.file_name().unwrap())).unwrap();
        }
    }
    let resumed = ["--tokens", "bare", "--steps", "1", "--batch", "4", "--report", "off", "--eval-every", "0"];
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &resumed, &["--init-params", "p.st"]].concat());
    let drawn_again = sample(&text).unwrap_or_default();
    assert!(ok && drawn_again.chars().count() == 60, "{text}");
    assert!(drawn_again.chars().all(|c| TEXT.contains(c) || c == '\n'), "{text}");
    // A file that records none needs the text's characters, and says so.
    common::write_params(&dir.path().join("bare.st"), &common::load_sorted_params(&dir.path().join("p.st")));
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &["--steps", "0", "--init-params", "bare.st"]].concat());
    assert!(!ok && text.contains("--init-params bare.st records no vocabulary"), "{text}");
    // The shards' vocabulary.txt serves instead, read without the shards; bare shards have none.
    let with_tokens = |params: &str, tokens: &str| {
        run("gpt", dir.path(), &[&common[..], &["--steps", "0", "--init-params", params, "--tokens", tokens]].concat())
    };
    let (ok, text) = with_tokens("bare.st", "shards");
    let drawn = sample(&text).unwrap_or_default();
    assert!(ok && drawn.chars().count() == 60 && drawn.chars().all(|c| TEXT.contains(c) || c == '\n'), "{text}");
    let (ok, text) = with_tokens("bare.st", "bare");
    let neither = "--init-params bare.st records no vocabulary to print its tokens as characters, nor is there a \
                   vocabulary.txt beside the shards of --tokens bare";
    assert!(!ok && text.contains(neither), "{text}");
    // Bare shards beside a file that records the vocabulary: the file's characters serve.
    let (ok, text) = with_tokens("p.st", "bare");
    let drawn = sample(&text).unwrap_or_default();
    assert!(ok && drawn.chars().count() == 60 && drawn.chars().all(|c| TEXT.contains(c) || c == '\n'), "{text}");
}

#[test]
fn shards_and_settings_that_do_not_fit_are_refused_before_step_1() {
    let dir = scratch("tokens-refused");
    std::fs::create_dir(dir.path().join("wide")).unwrap();
    let tokens: Vec<u16> = (0..400).map(|i| (i * 7 % 120) as u16).collect();
    overlap::token_shards::write_shard(&dir.path().join("wide/x_train.bin"), &tokens).unwrap();
    std::fs::create_dir(dir.path().join("no-val")).unwrap();
    overlap::token_shards::write_shard(&dir.path().join("no-val/x_train.bin"), &[1; 400]).unwrap();
    // A held-out file given as the training one.
    overlap::token_shards::write_shard(&dir.path().join("y_val.bin"), &[1; 400]).unwrap();
    std::fs::write(dir.path().join("garbage_train.bin"), vec![1u8; 2000]).unwrap();
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    // A vocabulary.txt of more characters than the model predicts: no sample could print them.
    std::fs::create_dir(dir.path().join("wide-vocabulary")).unwrap();
    overlap::token_shards::write_shard(&dir.path().join("wide-vocabulary/x_train.bin"), &[1; 400]).unwrap();
    let characters: String = (0..100u32).map(|i| char::from_u32(0x100 + i).unwrap()).collect();
    std::fs::write(dir.path().join("wide-vocabulary/vocabulary.txt"), characters).unwrap();
    // A held-out token past the vocabulary is refused before step 1 too, not at the measurement.
    std::fs::create_dir(dir.path().join("wide-val")).unwrap();
    overlap::token_shards::write_shard(&dir.path().join("wide-val/x_train.bin"), &[1; 400]).unwrap();
    overlap::token_shards::write_shard(&dir.path().join("wide-val/x_val.bin"), &tokens).unwrap();
    for (args, expected) in [
        (&["--tokens", "wide"][..], "token id 119 is past Gpt's vocabulary of 96 tokens"),
        (&["--tokens", "no-val", "--eval-every", "2"], "--eval-every needs held-out shards beside --tokens no-val"),
        (&["--tokens", "no-val/x_train.bin", "--eval-every", "2"], "no-val/x_val.bin is not there"),
        (
            &["--tokens", "y_val.bin", "--eval-every", "2"],
            "y_val.bin: it is a held-out (`val`) file itself: give its `train` file, or the folder of both",
        ),
        // Synthetic features are no token ids.
        (&[], "Gpt reads token ids: give it a text (--text FILE) or token shards (--tokens PATH)"),
        // `--data` on a language model is a text or shards: here, shards, refused as such.
        (&["--data", "no-val", "--eval-every", "2"], "--eval-every needs held-out shards beside --tokens no-val"),
        (&["--tokens", "garbage_train.bin"], "magic number 16843009, a token shard starts with 20240520"),
        (&["--tokens", "empty"], "no token shard named *_train.bin or *_train_NNNNNN.bin in this folder"),
        (&["--tokens", "missing"], "missing"),
        (&["--context", "8"], "--context sets the length of --text or --tokens samples; neither is given"),
        (&["--tokens", "no-val", "--text", "x.txt"], "cannot be used with"),
        (
            &["--tokens", "wide-val", "--eval-every", "2"],
            "x_val.bin: token id 119 is past Gpt's vocabulary of 96 tokens",
        ),
        // --sample prints characters: shards without a vocabulary have none to print.
        (
            &["--tokens", "no-val", "--sample", "5"],
            "--sample prints characters, but --tokens no-val has no vocabulary.txt",
        ),
        (
            &["--tokens", "wide-vocabulary", "--sample", "5"],
            "wide-vocabulary/vocabulary.txt: 100 distinct characters, but Gpt predicts 96 classes",
        ),
        // Training alone, as `--text` of those characters is refused: its parameters would record
        // a vocabulary the model cannot predict.
        (
            &["--tokens", "wide-vocabulary"],
            "wide-vocabulary/vocabulary.txt: 100 distinct characters, but Gpt predicts 96 classes",
        ),
    ] {
        // The example measures held-out loss by default; only the case about it keeps that.
        let extra: &[&str] =
            if args.contains(&"--eval-every") { &["--steps", "2"] } else { &["--steps", "2", "--eval-every", "0"] };
        let (ok, text) = run("gpt", dir.path(), &[args, extra].concat());
        assert!(!ok, "{args:?} ran:\n{text}");
        assert!(text.contains(expected), "{args:?}: expected `{expected}` in:\n{text}");
        assert!(!text.contains("step      1"), "{args:?}: refused only after training began:\n{text}");
    }
}

/// Shards without `vocabulary.txt` (llm.c's, or copied without it) resume a run trained on a
/// text, or start from its parameters: its checkpoints and parameter files keep the vocabulary
/// the run started with, which later runs check, and a sample prints it.
#[test]
fn a_resumed_run_keeps_the_vocabulary_its_data_does_not_record() {
    let dir = scratch("tokens-vocabulary");
    std::fs::write(dir.path().join("play.txt"), TEXT.repeat(30)).unwrap();
    let common = ["--context", "16", "--batch", "2", "--eval-every", "0", "--report", "off", "--save", "ck"];
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &["--text", "play.txt", "--steps", "2"]].concat());
    assert!(ok, "{text}");
    let (ok, text) = run("prepare", dir.path(), &["--text", "play.txt", "--out", "shards"]);
    assert!(ok, "{text}");
    let vocabulary = std::fs::read_to_string(dir.path().join("shards/vocabulary.txt")).unwrap();
    std::fs::remove_file(dir.path().join("shards/vocabulary.txt")).unwrap();
    let resume = ["--tokens", "shards", "--steps", "3", "--resume", "ck", "--sample", "30"];
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &resume].concat());
    let note = "no vocabulary.txt: its token ids are read as the characters the checkpoint records, which the run's \
                files record too";
    assert!(ok && text.contains(note) && text.contains("sample (30 characters"), "{text}");
    let saved = dir.path().join("ck/step-00000003/model.safetensors");
    assert_eq!(overlap::params_file::load_vocabulary(&saved).unwrap(), Some(vocabulary));
    // So a text of other characters is still refused from that checkpoint.
    std::fs::write(dir.path().join("other.txt"), "0123456789 ".repeat(40)).unwrap();
    let (ok, text) =
        run("gpt", dir.path(), &[&common[..], &["--text", "other.txt", "--steps", "4", "--resume", "ck"]].concat());
    assert!(!ok && text.contains("step-00000003"), "{text}");
    // Started from the parameters that checkpoint saved, the shards' run records them too.
    let start = ["--tokens", "shards", "--steps", "1", "--init-params", "ck/step-00000003/model.safetensors"];
    let (ok, text) = run("gpt", dir.path(), &[&common[..8], &start, &["--save-params", "next.st"]].concat());
    assert!(ok && text.contains("characters --init-params records"), "{text}");
    let vocabulary = std::fs::read_to_string(dir.path().join("play.txt")).unwrap();
    let mut characters: Vec<char> = vocabulary.chars().collect();
    characters.sort_unstable();
    characters.dedup();
    let recorded = overlap::params_file::load_vocabulary(&dir.path().join("next.st")).unwrap();
    assert_eq!(recorded, Some(characters.into_iter().collect::<String>()));
    let other = ["--text", "other.txt", "--steps", "1", "--init-params", "next.st"];
    let (ok, text) = run("gpt", dir.path(), &[&common[..8], &other].concat());
    assert!(!ok && text.contains("--init-params next.st"), "{text}");
}

/// llm.c's GPT-2 token shards (ids up to 50256, no vocabulary file): the shape over GPT-2's
/// padded vocabulary (`--vocab 50304`) trains on them, its first loss that of a uniform guess over
/// 50304 ids, as nanoGPT's `GPTConfig` pads them; the character shapes refuse them naming the id.
#[test]
fn gpt2_token_shards_train_the_shape_of_gpt2s_vocabulary() {
    let dir = scratch("tokens-gpt2");
    write_gpt2_shards(dir.path());
    let common = ["--tokens", "gpt2", "--context", "16", "--steps", "3", "--batch", "2", "--report", "off"];
    let (ok, text) = run("gpt", dir.path(), &common);
    assert!(!ok && text.contains("tiny_train.bin: token id 50256 is past Gpt's vocabulary of 96 tokens"), "{text}");
    assert!(!text.contains("step      1"), "refused before step 1: {text}");
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &["--vocab", "50304", "--log-every", "1"]].concat());
    assert!(ok && text.contains("step      3  validation loss"), "{text}");
    let first: f64 = text
        .split("step      1/3  loss ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|loss| loss.parse().ok())
        .unwrap_or_else(|| panic!("no first loss in {text}"));
    let uniform = (50304f64).ln();
    assert!((first - uniform).abs() < 0.5, "first loss {first} against ln 50304 = {uniform:.3}: {text}");
    // No vocabulary.txt beside GPT-2's shards: a sample has no characters to print.
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &["--vocab", "50304", "--sample", "5"]].concat());
    assert!(!ok && text.contains("has no vocabulary.txt beside its shards"), "{text}");
}

/// Shards beside the staging folder of a `prepare` that did not finish may be part of its text:
/// refused however the shard is named, by folder, by path, or by its bare name in the current
/// folder.
#[test]
fn shards_beside_an_unfinished_prepare_are_refused_however_named() {
    let dir = scratch("unfinished-prepare");
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(30)).unwrap();
    let (ok, text) = run("prepare", dir.path(), &["--text", "t.txt", "--out", "shards"]);
    assert!(ok, "{text}");
    let shards = dir.path().join("shards");
    std::fs::create_dir(shards.join(".prepare-t.partial")).unwrap();
    let train = common::training_shard(&shards);
    let steps = ["--steps", "1", "--batch", "2", "--context", "8", "--eval-every", "0", "--report", "off"];
    let by_path = format!("shards/{train}");
    let bare = format!("./{train}");
    for (cwd, tokens) in [(dir.path(), "shards"), (dir.path(), by_path.as_str()), (&shards, &bare), (&shards, &train)] {
        let (ok, text) = run("gpt", cwd, &[&steps[..], &["--tokens", tokens]].concat());
        assert!(!ok && text.contains("a `prepare` that did not finish"), "--tokens {tokens}:\n{text}");
    }
}

/// `prepare --shard-tokens` past what a shard's header counts (2^31 - 1) is refused as it is
/// read, not after the whole text is read and its shard fails to be written.
#[test]
fn a_shard_size_past_the_header_count_is_refused_at_once() {
    let dir = scratch("shard-size");
    std::fs::write(dir.path().join("t.txt"), TEXT).unwrap();
    let (ok, text) =
        run("prepare", dir.path(), &["--text", "t.txt", "--out", "shards", "--shard-tokens", "2147483648"]);
    assert!(
        !ok && text.contains("invalid value '2147483648' for '--shard-tokens <N>': must be a whole number from 2"),
        "{text}"
    );
    assert!(!dir.path().join("shards").exists(), "nothing written");
}

/// A dataset of more shards than the soft limit on open files (each stays open while the run
/// reads it) raises that limit toward the hard one; past the hard one, the refusal says how many
/// files the shards need.
#[test]
fn more_shards_than_the_soft_limit_on_open_files_are_read() {
    let dir = scratch("many-shards");
    std::fs::create_dir(dir.path().join("many")).unwrap();
    let tokens: Vec<u16> = (0..40).map(|i| (i * 7 % 60) as u16).collect();
    for i in 0..300 {
        overlap::token_shards::write_shard(&dir.path().join(format!("many/m_train_{i:06}.bin")), &tokens).unwrap();
    }
    let gpt = example("gpt");
    let limited = |ulimit: &str| {
        let script = format!("ulimit {ulimit} 64 && exec \"$0\" \"$@\"");
        let args = ["--tokens", "many", "--steps", "1", "--batch", "2", "--context", "8", "--eval-every", "0"];
        let out = std::process::Command::new("bash")
            .current_dir(dir.path())
            .args(["-c", &script, gpt.to_str().unwrap()])
            .args(args)
            .args(["--report", "off"])
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let mut hard = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given, which lives across the call.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) }, 0);
    // (Where this machine's hard limit leaves no room for them, only the refusal is checked.)
    if hard.rlim_max >= 300 + 256 {
        let (ok, text) = limited("-Sn");
        assert!(ok && text.contains("done: 1 step on 1 rank(s)"), "{text}");
    }
    let (ok, text) = limited("-n");
    assert!(!ok && text.contains("300 token shards stay open while the run reads them"), "{text}");
    assert!(
        text.contains("files this process holds, and it may open 64 (`ulimit -n`; at most 64 without privilege)"),
        "{text}"
    );
}
