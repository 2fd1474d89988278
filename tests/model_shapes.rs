//! The `gpt` example's compiled shapes, chosen by `--layers`, `--heads`, `--width` and `--vocab`
//! (nanoGPT's `n_layer`, `n_head`, `n_embd`, `vocab_size`): each trains the model its flags name, a shape it does not hold
//! is refused naming those it does, a start file without flags runs the shape it holds, and ranks
//! given different shapes are stopped before anything else.

mod common;

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

use common::{example, mpirun, mpirun_available, scratch};

const TEXT: &str = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n";

/// `gpt args` in `dir`: (exit code, stdout and stderr).
fn gpt(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(example("gpt")).current_dir(dir).args(args).output().expect("the example runs");
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// nanoGPT's parameter count for a shape (`GPT.get_num_params(non_embedding=False)`, biases on,
/// the head tied to `wte`): per block two LayerNorms (4d), `c_attn` (3d² + 3d), `c_proj`
/// (d² + d), `c_fc` (4d² + 4d) and the MLP's `c_proj` (4d² + d); then `wte`, `wpe` and `ln_f`.
/// nanoGPT's own `GPT` at the three shapes prints 0.81M, 10.68M and 7.23M (`wpe` left out): 813,824
/// − 8,192, 10,782,720 − 98,304 and 7,240,448 − 8,192 by this count.
fn nanogpt_parameters(layers: usize, width: usize, positions: usize, vocabulary: usize) -> usize {
    layers * (12 * width * width + 13 * width) + vocabulary * width + positions * width + 2 * width
}

/// Each shape's saved tensors, by name: `(name, shape)` of the ones that tell the shapes apart.
fn saved_shapes(file: &Path) -> Vec<(String, Vec<usize>)> {
    let bytes = std::fs::read(file).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut named: Vec<(String, Vec<usize>)> =
        tensors.tensors().into_iter().map(|(name, view)| (name, view.shape().to_vec())).collect();
    named.sort();
    named
}

/// Writes `bytes` into the FIFO `fifo` once a reader opens it, within two minutes (a writer
/// that waited in a blocking open would outlive a run that never reads).
fn feed_once(fifo: &Path, bytes: Vec<u8>) -> std::thread::JoinHandle<std::io::Result<()>> {
    use std::io::{ErrorKind, Write};
    use std::os::unix::fs::OpenOptionsExt;
    use std::time::{Duration, Instant};
    let fifo = fifo.to_owned();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        let nap = || std::thread::sleep(Duration::from_millis(2));
        let mut file = loop {
            // Without a reader, a non-blocking open for writing fails with ENXIO.
            match std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&fifo) {
                Ok(file) => break file,
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < deadline => nap(),
                Err(e) => return Err(e),
            }
        };
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            match file.write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => nap(),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })
}

#[test]
fn each_compiled_shape_trains_the_model_its_flags_name() {
    let dir = scratch("shapes");
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(20)).unwrap();
    let run = ["--text", "t.txt", "--steps", "1", "--batch", "1", "--context", "8", "--eval-every", "0"];
    let run = [&run[..], &["--report", "off"]].concat();
    for (flags, layers, width, positions, vocabulary) in [
        (&[][..], 4, 128, 64, 96),
        (&["--layers", "4", "--heads", "4", "--width", "128"][..], 4, 128, 64, 96),
        (&["--layers", "6", "--heads", "6", "--width=384"][..], 6, 384, 256, 96),
        // The text's characters are the first 96 of GPT-2's token ids, padded.
        (&["--vocab", "50304"][..], 4, 128, 64, 50304),
    ] {
        let (code, text) = gpt(dir.path(), &[flags, &["--print-schedule"]].concat());
        assert_eq!(code, Some(0), "{flags:?}: {text}");
        let count = nanogpt_parameters(layers, width, positions, vocabulary);
        assert!(text.contains(&format!(", {count} parameters (")), "{flags:?}: {count} parameters in\n{text}");

        let (code, text) = gpt(dir.path(), &[&run[..], flags, &["--save-params", "p.st"]].concat());
        assert_eq!(code, Some(0), "{flags:?}: {text}");
        let saved = saved_shapes(&dir.path().join("p.st"));
        let shape_of = |name: &str| saved.iter().find(|(n, _)| n == name).map(|(_, s)| s.clone());
        let last = format!("h.{}.attend.attn.c_attn.weight", layers - 1);
        assert_eq!(shape_of(&last), Some(vec![3 * width, width]), "{flags:?}: {saved:?}");
        assert_eq!(shape_of(&format!("h.{layers}.mlp.c_fc.weight")), None, "{flags:?}: {saved:?}");
        assert_eq!(shape_of("wpe.weight"), Some(vec![positions, width]), "{flags:?}: {saved:?}");
        assert_eq!(shape_of("wte.weight"), Some(vec![vocabulary, width]), "{flags:?}: {saved:?}");
        assert_eq!(
            saved.iter().map(|(_, s)| s.iter().product::<usize>()).sum::<usize>(),
            nanogpt_parameters(layers, width, positions, vocabulary)
        );
    }
}

#[test]
fn a_shape_not_compiled_in_is_refused_naming_the_compiled_ones() {
    let dir = scratch("shapes-refused");
    for flags in [&["--layers", "6"][..], &["--heads", "8"], &["--layers", "6", "--heads", "6", "--width", "256"]] {
        let (code, text) = gpt(dir.path(), &[flags, &["--steps", "1"]].concat());
        assert_eq!(code, Some(2), "{flags:?}: {text}");
        assert!(text.contains("is compiled into this program: it holds `--layers 4 --heads 4 --width 128 --vocab 96`, `--layers 6 --heads 6 --width 384 --vocab 96`, `--layers 4 --heads 4 --width 128 --vocab 50304` (the first is the default)"), "{text}");
        assert!(text.contains("one more `nanogpt!` line"), "{text}");
    }
    let (code, text) = gpt(dir.path(), &["--layers", "6", "--steps", "1"]);
    assert!(code == Some(2) && text.contains("no model of `--layers 6 --heads 4 --width 128 --vocab 96`"), "{text}");
    // A context past the shape's positions names the shape, whose siblings may hold more.
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(20)).unwrap();
    let (code, text) = gpt(dir.path(), &["--text", "t.txt", "--steps", "1", "--context", "100"]);
    let said = "--context 100: Gpt's position embedding has rows for 64 positions in this program's shape \
                `--layers 4 --heads 4 --width 128 --vocab 96` (--help lists the others and the longest --context of \
                each)";
    assert!(code != Some(0) && text.contains(said), "{text}");
    // A model of GPT-2's tokens runs on characters, told that most of its tokens never occur.
    let run = ["--text", "t.txt", "--steps", "1", "--batch", "1", "--eval-every", "0"];
    let (code, text) = gpt(dir.path(), &[&run[..], &["--vocab", "50304"]].concat());
    let said = "note: the data's vocabulary is 23 characters, and Gpt predicts 50304 tokens: 50281 of them never occur";
    assert!(code == Some(0) && text.contains(said), "{text}");
    let (code, text) = gpt(dir.path(), &run);
    assert!(code == Some(0) && !text.contains("never occur"), "{text}");
    // Not a number: clap's own message, naming the flag.
    let (code, text) = gpt(dir.path(), &["--width", "wide"]);
    assert!(code == Some(2) && text.contains("invalid value 'wide' for '--width <N>'"), "{text}");
    let (code, help) = gpt(dir.path(), &["--help"]);
    assert_eq!(code, Some(0), "{help}");
    // Exactly the shapes tests/doc_commands.rs checks the documented runs against.
    let held = "The shapes this program holds: `--layers 4 --heads 4 --width 128 --vocab 96` (--context up to 64), \
                `--layers 6 --heads 6 --width 384 --vocab 96` (--context up to 256), `--layers 4 --heads 4 --width 128 \
                --vocab 50304` (--context up to 64)\n";
    assert!(help.contains(held), "{help}");
    // The flags tests/doc_commands.rs lets the documentation give `gpt`.
    for flag in ["--layers <N>", "--heads <N>", "--width <N>", "--vocab <N>"] {
        assert!(help.contains(flag), "{flag} in {help}");
    }
    // Help and the version are answered whatever shape the line names.
    let (code, asked) = gpt(dir.path(), &["--layers", "6", "--help"]);
    assert!(code == Some(0) && asked.contains(held), "{asked}");
    let (code, version) = gpt(dir.path(), &["--layers", "6", "--version"]);
    assert!(code == Some(0) && version.starts_with("gpt "), "{version}");
}

/// Whatever the ranks are told to do (train, time the all-reduces alone, print the schedule),
/// ranks of different shapes are stopped first, naming the shapes.
#[test]
fn ranks_given_different_shapes_stop_before_anything_else() {
    if !mpirun_available() {
        eprintln!("skipped: mpirun is not available");
        return;
    }
    let dir = scratch("shapes-ranks");
    let text = dir.path().join("t.txt");
    std::fs::write(&text, TEXT.repeat(20)).unwrap();
    let (gpt, text) = (example("gpt"), text.to_str().unwrap().to_owned());
    let gpt = gpt.to_str().unwrap();
    let train = ["--text", &text, "--steps", "2", "--batch", "1", "--context", "8", "--eval-every", "0"];
    let baby = ["--layers", "6", "--heads", "6", "--width", "384"];
    for run in [&train[..], &["--comm-only", "--steps", "2"], &["--print-schedule"]] {
        let args: Vec<&str> = [&["-n", "1", gpt][..], run, &baby, &[":", "-n", "1", gpt], run].concat();
        let out = mpirun(&args);
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "{run:?}: {said}");
        assert!(said.contains("rank 0: error: invalid configuration: ranks run with other settings than rank 0, which every rank must share: the model's shape (rank(s) 1; this rank's: --layers 6 --heads 6 --width 384 --vocab 96)"), "{run:?}: {said}");
        assert!(!said.contains("step      1/2") && !said.contains("schedule of Gpt"), "{run:?}: {said}");
    }
}

/// Given no shape flags, a run that starts from a file (`--init-params`, or `--resume`'s newest
/// checkpoint) runs the shape whose parameters the file holds, and says so, as nanoGPT's
/// `sample.py` takes the model's sizes from its checkpoint; flags given still decide.
#[test]
fn a_start_file_without_shape_flags_runs_the_shape_it_holds() {
    let dir = scratch("shapes-start");
    std::fs::write(dir.path().join("t.txt"), TEXT.repeat(20)).unwrap();
    let run = ["--text", "t.txt", "--batch", "1", "--context", "8", "--eval-every", "0", "--report", "off"];
    let baby = ["--layers", "6", "--heads", "6", "--width", "384"];
    let (code, text) =
        gpt(dir.path(), &[&run[..], &baby, &["--steps", "1", "--save-params", "b.st", "--save", "ck"]].concat());
    assert_eq!(code, Some(0), "{text}");
    let note = "holds the model of `--layers 6 --heads 6 --width 384 --vocab 96`: that shape runs";
    let (code, text) = gpt(dir.path(), &["--steps", "0", "--init-params", "b.st", "--sample", "5"]);
    assert!(code == Some(0) && text.contains(&format!("note: --init-params b.st {note}")), "{text}");
    assert!(text.contains("sample (5 characters"), "{text}");
    let (code, text) = gpt(dir.path(), &[&run[..], &["--steps", "2", "--resume", "ck"]].concat());
    assert!(code == Some(0) && text.contains(&format!("note: --resume ck {note}")), "{text}");
    assert!(text.contains("resumed from ck at step 1"), "{text}");
    // A shape flag given decides: the default shape does not fit the file, which says where.
    let (code, text) = gpt(dir.path(), &["--steps", "0", "--init-params", "b.st", "--sample", "5", "--layers", "4"]);
    assert!(code != Some(0) && !text.contains("that shape runs"), "{text}");
    assert!(text.contains("--init-params b.st does not fit Gpt"), "{text}");
    assert!(
        text.contains("`h.0.attend.attn.c_attn.weight` has shape [1152, 384], the model expects [384, 128]"),
        "{text}"
    );
    // Shape flags given that do not name the file's shape: a note says which it holds.
    let (code, text) = gpt(dir.path(), &["--steps", "0", "--init-params", "b.st", "--sample", "5", "--width", "384"]);
    assert!(code == Some(2) && text.contains("no model of `--layers 4 --heads 4 --width 384 --vocab 96`"), "{text}");
    let hint = "note: --init-params b.st holds the model of `--layers 6 --heads 6 --width 384 --vocab 96`, which the \
                shape flags \
                given do not name: give those, or none";
    assert!(text.contains(hint), "{text}");
    // A flag left without its value reads as typed: the shape's flags go before the user's words.
    let (code, text) = gpt(dir.path(), &["--steps", "0", "--init-params", "b.st", "--sample"]);
    assert!(code == Some(2) && text.contains("a value is required for '--sample <N>'"), "{text}");
    assert!(!text.contains("unexpected argument"), "{text}");
    // A file name that is not UTF-8 is read as the run reads it.
    let odd = std::ffi::OsStr::from_bytes(b"b\xff.st");
    std::fs::copy(dir.path().join("b.st"), dir.path().join(odd)).unwrap();
    let out = Command::new(example("gpt"))
        .current_dir(dir.path())
        .args(["--steps", "0", "--sample", "5", "--init-params"])
        .arg(odd)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("b\u{fffd}.st holds the model of `--layers 6"), "{text}");
    // A pipe is read once, by the run: its shape cannot be told beforehand, the flags give it.
    // (A second read would wait for a writer that has gone: `timeout` ends it.)
    let fifo = dir.path().join("b.fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let writer = feed_once(&fifo, std::fs::read(dir.path().join("b.st")).unwrap());
    let out = Command::new("timeout")
        .arg("120")
        .arg(example("gpt"))
        .current_dir(dir.path())
        .args([&["--steps", "0", "--init-params", "b.fifo", "--sample", "5"][..], &baby].concat())
        .output()
        .unwrap();
    writer.join().unwrap().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("sample (5 characters"), "{:?}: {text}", out.status);
    // The default shape's own file needs no note.
    let (code, text) = gpt(dir.path(), &[&run[..], &["--steps", "1", "--save-params", "n.st"]].concat());
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = gpt(dir.path(), &["--steps", "0", "--init-params", "n.st", "--sample", "5"]);
    assert!(code == Some(0) && !text.contains("that shape runs"), "{text}");
}
