//! `--text FILE`: a language model trained on a text's characters (the `gpt` example), on one
//! process and on two ranks alike, and every way a text or a model can fail to fit refused
//! before step 1 with its reason.

mod common;

use std::process::Command;

use common::{example, run_example_merged as run, scratch};

const TEXT: &str = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n";

#[test]
fn a_text_trains_the_gpt_example_alike_on_one_and_two_ranks() {
    let dir = scratch("text");
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(20)).unwrap();
    let common = ["--text", "t.txt", "--steps", "3", "--log-every", "1", "--report", "off"];
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &["--batch", "2", "--save-params", "one.st"]].concat());
    assert!(ok, "{text}");
    assert!(text.contains("step      3/3  loss"), "{text}");
    // With `--report json`, stdout holds the report's document alone; the sample goes to stderr.
    let sampled = ["--text", "t.txt", "--steps", "3", "--log-every", "1", "--report", "json", "--batch", "2"];
    let out = Command::new(example("gpt"))
        .current_dir(dir.path())
        .args([&sampled[..], &["--sample", "40", "--save-params", "sampled.st"]].concat())
        .output()
        .unwrap();
    let (stdout, text) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{stdout}{text}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is one JSON document");
    assert_eq!(report["steps"], 3, "{stdout}");
    let heading = "sample (40 characters, temperature 0.8, top-k 200):\n";
    let sample = |text: &str| -> String { text.split_once(heading).expect("a sample").1.chars().take(40).collect() };
    let drawn = sample(&text);
    assert_eq!(drawn.chars().count(), 40, "{text}");
    assert!(drawn.chars().all(|c| TEXT.contains(c)), "only the text's characters: {drawn:?}");
    // The same sample from the saved parameters, without training (`--steps 0`).
    let (ok, again) =
        run("gpt", dir.path(), &["--text", "t.txt", "--steps", "0", "--init-params", "sampled.st", "--sample", "40"]);
    assert!(ok && !again.contains("step      1"), "{again}");
    assert_eq!(sample(&again), drawn, "{again}");
    // A checkpoint is sampled from through its parameters file, which the refusal of `--resume` names.
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &["--batch", "2", "--save", "ck"]].concat());
    assert!(ok, "{text}");
    let (ok, refused) = run("gpt", dir.path(), &["--steps", "0", "--resume", "ck", "--sample", "5"]);
    let file = "ck/step-00000003/model.safetensors";
    assert!(!ok && refused.contains(&format!("`--init-params {file} --sample N` in place of --resume")), "{refused}");
    let (ok, sampled) = run("gpt", dir.path(), &["--steps", "0", "--init-params", file, "--sample", "5"]);
    assert!(ok && sampled.contains("sample (5 characters"), "{sampled}");
    // A file recording an empty vocabulary: refused before the sample's heading is printed.
    let bytes = std::fs::read(dir.path().join("sampled.st")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let metadata = std::collections::HashMap::from([("vocabulary".to_string(), String::new())]);
    safetensors::serialize_to_file(tensors.tensors(), Some(metadata), &dir.path().join("empty.st")).unwrap();
    let (ok, refused) = run("gpt", dir.path(), &["--steps", "0", "--init-params", "empty.st", "--sample", "5"]);
    assert!(
        !ok && refused.contains("sampling from a vocabulary of 0 tokens") && !refused.contains("sample ("),
        "{refused}"
    );
    let (ok, refused) = run("gpt", dir.path(), &["--text", "t.txt", "--steps", "0", "--sample", "40"]);
    assert!(
        !ok && refused
            .contains("--steps 0 trains nothing: it samples (--sample N) from the parameters of --init-params"),
        "{refused}"
    );
    if common::mpirun_available() {
        let (exe, wdir) = (example("gpt"), dir.path().to_str().unwrap());
        let ranks = ["--wdir", wdir, "-n", "2", exe.to_str().unwrap()];
        common::mpirun_ok(&[&ranks[..], &common, &["--batch", "1", "--save-params", "two.st"]].concat());
        let (one, two) = (
            common::load_sorted_params(&dir.path().join("one.st")),
            common::load_sorted_params(&dir.path().join("two.st")),
        );
        // Every tensor agrees within 4e-7 but `c_attn.bias` (2.5e-4): its key part has a zero
        // gradient but for rounding (a shift shared by all keys leaves the softmax unchanged),
        // and AdamW turns that rounding, which differs with the order of the sums, into full steps.
        let diff = common::max_relative_difference(&one, &two);
        assert!(diff < 1e-3, "two ranks of one sequence each read the samples one rank of two reads: {diff:e}");
        // A rank that gives the default context is no different from one that leaves it out.
        let exe = exe.to_str().unwrap();
        let short = ["--text", "t.txt", "--steps", "1", "--batch", "1", "--report", "off"];
        let one_rank = [&["--wdir", wdir, "-n", "1", exe][..], &short].concat();
        common::mpirun_ok(&[&one_rank[..], &[":"], &one_rank, &["--context", "64"]].concat());
        // A rank whose --init-params is missing says so, though the other rank's file holds
        // another shape than the default this rank then had (rank 0 says the shapes differ).
        let baby = ["--layers", "6", "--heads", "6", "--width", "384", "--context", "8", "--save-params", "baby.st"];
        common::mpirun_ok(&[&one_rank[..], &baby].concat());
        let out = common::mpirun(
            &[&one_rank[..], &["--init-params", "baby.st", ":"], &one_rank, &["--init-params", "gone.st"]].concat(),
        );
        let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{text}");
        let rank_1: Vec<&str> = text.lines().filter(|l| l.starts_with("rank 1: error:")).collect();
        assert!(matches!(&rank_1[..], [line] if line.contains("--init-params gone.st: No such file")), "{text}");
    }
}

#[test]
fn texts_and_models_that_do_not_fit_are_refused_before_step_1() {
    let dir = scratch("text-refused");
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(20)).unwrap();
    std::fs::write(dir.path().join("latin1.txt"), b"caf\xe9 au lait, caf\xe9 au lait".repeat(20)).unwrap();
    let wide: String = (0..200u32).filter_map(|c| char::from_u32(0x4e00 + c)).collect::<String>().repeat(3);
    std::fs::write(dir.path().join("wide.txt"), wide).unwrap();
    std::fs::write(dir.path().join("prompt.txt"), "the ").unwrap();
    std::fs::write(dir.path().join("tok.bin"), "a tokenizer").unwrap();
    for (exe, args, expected) in [
        ("gpt", &["--text", "latin1.txt"][..], "latin1.txt: not UTF-8 text (invalid at byte 3)"),
        ("gpt", &["--text", "wide.txt"], "wide.txt: 200 distinct characters, but Gpt predicts 96 classes"),
        ("gpt", &["--text", "t.txt", "--context", "100"], "--context 100: Gpt's position embedding has rows for 64"),
        ("gpt", &["--text", "missing.txt"], "--text missing.txt: No such file"),
        ("gpt", &["--text", "."], "--text .: Is a directory"),
        ("mlp", &["--text", "t.txt"], "--text feeds token ids, one per row; Mlp's first layer takes 784 inputs"),
        ("gpt", &["--text", "t.txt", "--data", "."], "cannot be used with"),
        // An output over the data it trains on.
        (
            "gpt",
            &["--text", "t.txt", "--save-params", "./t.txt"],
            "--save-params ./t.txt is a file the training data is read from: the run would write over it",
        ),
        ("gpt", &["--text", "t.txt", "--trace", "t.txt"], "--trace t.txt is a file the training data is read from"),
        // Nor over what --sample reads.
        (
            "gpt",
            &["--text", "t.txt", "--sample", "5", "--start", "FILE:prompt.txt", "--save-params", "prompt.txt"],
            "--save-params prompt.txt is the --start file, which --sample reads: the run would write over it",
        ),
        (
            "gpt",
            &["--tokens", "shards", "--sample", "5", "--tokenizer", "tok.bin", "--trace", "./tok.bin"],
            "--trace ./tok.bin is the --tokenizer file, which --sample reads",
        ),
    ] {
        let (ok, text) = run(exe, dir.path(), &[args, &["--steps", "2"]].concat());
        assert!(!ok, "{exe} {args:?} ran:\n{text}");
        assert!(text.contains(expected), "{exe} {args:?}: expected `{expected}` in:\n{text}");
        assert!(!text.contains("step      1"), "{exe} {args:?}: refused only after training began:\n{text}");
    }
    assert_eq!(std::fs::read_to_string(dir.path().join("t.txt")).unwrap(), TEXT.repeat(20), "the text is intact");
    assert_eq!(std::fs::read_to_string(dir.path().join("prompt.txt")).unwrap(), "the ", "the prompt is intact");
    assert_eq!(std::fs::read_to_string(dir.path().join("tok.bin")).unwrap(), "a tokenizer", "the tokenizer is intact");
}

/// The sequence length trained on goes with the parameters file and the checkpoint's, and a
/// sample from the file reads back no further by default: the position table's later rows were
/// never trained. Asked to read further, it says so.
#[test]
fn a_sample_reads_back_no_further_than_training_did() {
    let dir = scratch("text-positions");
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(20)).unwrap();
    let train = ["--text", "t.txt", "--context", "8", "--steps", "2", "--batch", "2", "--report", "off"];
    let (ok, text) =
        run("gpt", dir.path(), &[&train[..], &["--eval-every", "0", "--save-params", "p.st", "--save", "ck"]].concat());
    assert!(ok, "{text}");
    for file in ["p.st", "ck/step-00000002/model.safetensors"] {
        assert_eq!(overlap::params_file::load_notes(&dir.path().join(file)).unwrap().positions, Some(8), "{file}");
    }
    // A run resumed, or started from the file, at a shorter context keeps 8: the rows past its
    // context were trained all the same.
    let shorter = ["--text", "t.txt", "--context", "4", "--batch", "2", "--report", "off", "--eval-every", "0"];
    let resumed = ["--steps", "3", "--resume", "ck", "--save", "ck", "--save-params", "resumed.st"];
    let (ok, text) = run("gpt", dir.path(), &[&shorter[..], &resumed].concat());
    assert!(ok, "{text}");
    let started = ["--steps", "1", "--init-params", "p.st", "--save-params", "started.st"];
    let (ok, text) = run("gpt", dir.path(), &[&shorter[..], &started].concat());
    assert!(ok, "{text}");
    for file in ["resumed.st", "ck/step-00000003/model.safetensors", "started.st"] {
        assert_eq!(overlap::params_file::load_notes(&dir.path().join(file)).unwrap().positions, Some(8), "{file}");
    }
    // Resumed at its total already with a sample asked for: how to sample from it instead.
    let (ok, text) =
        run("gpt", dir.path(), &[&shorter[..], &["--steps", "3", "--resume", "ck", "--sample", "5"]].concat());
    assert!(!ok && text.contains("nothing to do"), "{text}");
    let hint = "note: to sample from the checkpoint, give `--steps 0 --init-params ck/step-00000003/model.safetensors \
                --sample 5` in place of --resume";
    assert!(text.contains(hint), "{text}");
    // Sequences of one position are sequences too.
    let one = ["--text", "t.txt", "--context", "1", "--steps", "1", "--report", "off", "--eval-every", "0"];
    let (ok, text) = run("gpt", dir.path(), &[&one[..], &["--save-params", "p1.st"]].concat());
    assert!(ok, "{text}");
    assert_eq!(overlap::params_file::load_notes(&dir.path().join("p1.st")).unwrap().positions, Some(1));
    let sample = |extra: &[&str]| {
        let args =
            [&["--text", "t.txt", "--steps", "0", "--init-params", "p.st", "--sample", "40"][..], extra].concat();
        let (ok, text) = run("gpt", dir.path(), &args);
        assert!(ok, "{text}");
        text
    };
    let (by_default, as_trained, further) = (sample(&[]), sample(&["--context", "8"]), sample(&["--context", "32"]));
    assert_eq!(by_default, as_trained, "a sample reads back the 8 positions trained on");
    assert!(!by_default.contains("note:"), "{by_default}");
    let note = "note: --init-params was trained on sequences of 8 positions; sampling reads back 32";
    assert!(further.contains(note), "{further}");
    // Sampling reads only the text's characters: a text shorter than one sample serves.
    let mut characters: Vec<char> = TEXT.chars().collect();
    characters.sort_unstable();
    characters.dedup();
    std::fs::write(dir.path().join("chars.txt"), characters.iter().collect::<String>()).unwrap();
    let args = ["--text", "chars.txt", "--steps", "0", "--init-params", "p.st", "--sample", "40"];
    let (ok, from_characters) = run("gpt", dir.path(), &args);
    assert!(ok && characters.len() < 40, "{from_characters}");
    assert_eq!(from_characters, by_default, "the same vocabulary, the same sample");
    // A file that records no vocabulary (nor positions) is read with the text's, and says so.
    common::write_params(&dir.path().join("bare.st"), &common::load_sorted_params(&dir.path().join("p.st")));
    let (ok, text) =
        run("gpt", dir.path(), &["--text", "t.txt", "--steps", "0", "--init-params", "bare.st", "--sample", "5"]);
    assert!(ok && text.contains("note: --init-params records no vocabulary"), "{text}");
    assert!(!by_default.contains("records no vocabulary"), "{by_default}");
    // A long sample shows as it is drawn: its first characters arrive while it goes on (50000
    // characters take seconds), and a stop keeps them.
    let mut job = Command::new(example("gpt"))
        .current_dir(dir.path())
        .args(["--text", "t.txt", "--steps", "0", "--init-params", "p.st", "--sample", "50000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut shown = String::new();
    let mut stdout = std::io::BufReader::new(job.stdout.take().unwrap());
    while shown.split_once('\n').is_none_or(|(_, sample)| sample.len() < 30) {
        let mut byte = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut stdout, &mut byte).unwrap(), 1, "the sample ended early: {shown}");
        shown.push(byte[0] as char);
    }
    assert!(job.try_wait().unwrap().is_none(), "30 characters came before the sample ended");
    job.kill().unwrap();
    job.wait().unwrap();
    assert!(shown.starts_with("sample (50000 characters"), "{shown}");
}

/// A sample needs the text's characters alone: a file of the model's two characters serves,
/// where training would need more. A file that is not what its flag reads is named with the flag.
#[test]
fn a_sample_needs_only_the_vocabulary_and_wrong_files_name_their_flag() {
    let dir = scratch("text-two-characters");
    std::fs::write(dir.path().join("ab.txt"), "ab".repeat(200)).unwrap();
    let train = ["--text", "ab.txt", "--context", "4", "--steps", "1", "--batch", "2", "--report", "off"];
    let (ok, text) = run("gpt", dir.path(), &[&train[..], &["--eval-every", "0", "--save-params", "ab.st"]].concat());
    assert!(ok, "{text}");
    std::fs::write(dir.path().join("two.txt"), "ba").unwrap();
    let sample = |text: &str, params: &str| {
        run("gpt", dir.path(), &["--text", text, "--steps", "0", "--init-params", params, "--sample", "10"])
    };
    let (ok, text) = sample("two.txt", "ab.st");
    assert!(ok && text.contains("sample (10 characters"), "{text}");
    std::fs::write(dir.path().join("empty.txt"), "").unwrap();
    let (ok, text) = sample("empty.txt", "ab.st");
    assert!(!ok && text.contains("empty.txt: empty: no characters"), "{text}");
    let (ok, text) = sample("two.txt", "two.txt");
    assert!(!ok && text.contains("--init-params two.txt: not a safetensors file ("), "{text}");
    let (ok, text) = run("gpt", dir.path(), &["--tokens", "missing", "--steps", "1"]);
    assert!(!ok && text.contains("--tokens missing: "), "{text}");
}

/// The vocabulary (the text's sorted characters) goes with the parameters file and the
/// checkpoint (its state and its parameters file); another text's, whose token ids would mean other characters, is refused when
/// either is loaded, naming the first character that differs.
#[test]
fn the_vocabulary_travels_with_parameters_and_checkpoints() {
    let dir = scratch("text-vocabulary");
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(20)).unwrap();
    std::fs::write(dir.path().join("other.txt"), TEXT.replace('q', "z").repeat(20)).unwrap();
    let common = ["--steps", "2", "--batch", "2", "--report", "off", "--eval-every", "0"];
    let (ok, text) =
        run("gpt", dir.path(), &[&common[..], &["--text", "t.txt", "--save-params", "p.st", "--save", "ck"]].concat());
    assert!(ok, "{text}");
    let mut sorted: Vec<char> = TEXT.chars().collect();
    sorted.sort_unstable();
    sorted.dedup();
    let saved = overlap::params_file::load_vocabulary(&dir.path().join("p.st")).unwrap();
    assert_eq!(saved, Some(sorted.iter().collect::<String>()), "the parameters file's metadata");
    // The same text loads and resumes; another does not.
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &["--text", "t.txt", "--init-params", "p.st"]].concat());
    assert!(ok, "{text}");
    let (ok, text) = run("gpt", dir.path(), &[&common[..], &["--text", "other.txt", "--init-params", "p.st"]].concat());
    assert!(!ok && text.contains("--init-params p.st: the saved vocabulary and this data's have"), "{text}");
    assert!(text.contains("was 'q', it is 'r' here"), "{text}");
    // A checkpoint's parameters file records it too.
    let model_file = "ck/step-00000002/model.safetensors";
    let (ok, text) =
        run("gpt", dir.path(), &[&common[..], &["--text", "other.txt", "--init-params", model_file]].concat());
    assert!(!ok && text.contains("was 'q', it is 'r' here"), "{text}");
    let resume = ["--steps", "3", "--batch", "2", "--report", "off", "--eval-every", "0", "--resume", "ck"];
    let (ok, text) = run("gpt", dir.path(), &[&resume[..], &["--text", "other.txt"]].concat());
    assert!(!ok && text.contains("token ids would mean other characters"), "{text}");
    let (ok, text) = run("gpt", dir.path(), &[&resume[..], &["--text", "t.txt"]].concat());
    assert!(ok, "{text}");
    // The data is compared by its samples: the same text by another path is the same data, and
    // another text of the same name and characters is not.
    let (ok, text) = run("gpt", dir.path(), &[&resume[..], &["--text", "./t.txt"]].concat());
    assert!(ok && !text.contains("other data"), "{text}");
    let reversed: String = TEXT.repeat(20).chars().rev().collect();
    std::fs::write(dir.path().join("t.txt"), reversed).unwrap();
    let (ok, text) = run("gpt", dir.path(), &[&resume[..], &["--text", "t.txt"]].concat());
    assert!(ok && text.contains("warning: resuming with other data: t.txt: "), "{text}");
    assert!(text.contains("holds other samples than the checkpoint's run read (content hash"), "{text}");
}

/// `gpt --data FILE`: on a language model `--data` reads a text file as `--text`, and a folder of
/// prepared shards or one shard (its magic number) as `--tokens`, each to the very parameters the
/// flag it stands for gives, saying which it read.
#[test]
fn data_on_a_language_model_reads_a_text_or_token_shards() {
    let dir = scratch("data-text");
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(20)).unwrap();
    let (ok, text) = run("prepare", dir.path(), &["--text", "t.txt", "--out", "shards"]);
    assert!(ok, "{text}");
    let shard = format!("shards/{}", common::training_shard(&dir.path().join("shards")));
    let steps = ["--steps", "2", "--batch", "2", "--context", "8", "--report", "off", "--eval-every", "0"];
    for (data, flag) in [("t.txt", "--text"), ("shards", "--tokens"), (shard.as_str(), "--tokens")] {
        let (ok, by_data) = run("gpt", dir.path(), &[&steps[..], &["--data", data, "--save-params", "d.st"]].concat());
        assert!(ok, "{by_data}");
        assert!(
            by_data.contains(&format!("note: --data {data} on a language model: read as {flag} {data}")),
            "{by_data}"
        );
        let (ok, by_flag) = run("gpt", dir.path(), &[&steps[..], &[flag, data, "--save-params", "f.st"]].concat());
        assert!(ok && !by_flag.contains("note: --data"), "{by_flag}");
        let saved = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
        assert!(saved("d.st") == saved("f.st"), "--data {data} trained other parameters than {flag} {data}");
    }
    // A pipe is read as a text, whole: nothing of it is taken to look at its first bytes.
    let pipe = dir.path().join("pipe");
    let c_path = std::ffi::CString::new(pipe.to_str().unwrap()).unwrap();
    // SAFETY: `c_path` is a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "a FIFO can be made");
    let writer = std::thread::spawn(move || std::fs::write(pipe, TEXT.repeat(20)));
    let (ok, piped) = run("gpt", dir.path(), &[&steps[..], &["--data", "pipe", "--save-params", "d.st"]].concat());
    writer.join().unwrap().unwrap();
    assert!(
        ok && piped.contains("read as --text pipe (not a regular file; give --tokens for token shards)"),
        "{piped}"
    );
    let (ok, by_flag) = run("gpt", dir.path(), &[&steps[..], &["--text", "t.txt", "--save-params", "f.st"]].concat());
    assert!(ok, "{by_flag}");
    let saved = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
    assert!(saved("d.st") == saved("f.st"), "the piped text trained other parameters than its file");
    // And samples, as the flag it stands for does.
    let (ok, sampled) = run("gpt", dir.path(), &[&steps[..], &["--data", "t.txt", "--sample", "5"]].concat());
    assert!(ok && sampled.contains("sample (5 characters"), "{sampled}");
}
