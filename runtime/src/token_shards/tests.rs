//! Shards written and read back, malformed ones refused, and what `prepare_characters` writes.

use super::names::split_part;
use super::*;

#[test]
fn shards_round_trip_and_windows_stay_inside_one_shard() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("x_train_000000.bin"), dir.path().join("x_train_000001.bin"));
    write_shard(&a, &(0..10).collect::<Vec<u16>>()).unwrap();
    write_shard(&b, &(100..107).collect::<Vec<u16>>()).unwrap();
    assert_eq!(read_shard(&b).unwrap(), (100..107).collect::<Vec<u16>>());
    let mut set = TokenShards::open(&[a, b], 3).unwrap();
    // 9 / 3 = 3 windows in the first shard, 6 / 3 = 2 in the second.
    let mut batch = Batch::default();
    set.fill(2, 4, &mut batch).unwrap();
    let inputs: Vec<u16> = batch.inputs.as_slice().iter().map(|&x| x as u16).collect();
    assert_eq!(inputs, [6, 7, 8, 100, 101, 102, 103, 104, 105, 0, 1, 2], "windows 2, 3, 4, then 0 again");
    let labels: Vec<usize> = batch.labels.iter().take(6).copied().collect();
    assert_eq!(labels, [7, 8, 9, 101, 102, 103]);
    assert_eq!(set.max_token().0, 106);
}

#[test]
fn a_token_past_the_vocabulary_is_blamed_on_its_own_shard_and_the_files_are_listed() {
    let dir = tempfile::tempdir().unwrap();
    let shard = |i: usize| dir.path().join(format!("x_train_00000{i}.bin"));
    write_shard(&shard(0), &[0, 1, 2, 1, 0]).unwrap();
    write_shard(&shard(1), &[2, 7, 1, 0, 2]).unwrap();
    write_shard(&shard(2), &[1, 2, 0, 1, 2]).unwrap();
    let paths = [shard(0), shard(1), shard(2)];
    let set = TokenShards::open(&paths, 2).unwrap();
    assert_eq!(set.max_token(), (7, shard(1).as_path()), "the id and the shard holding it");
    assert_eq!(set.files(), paths.to_vec(), "the shards, and no vocabulary file where none is");
    std::fs::write(dir.path().join(VOCABULARY_FILE), "abc").unwrap();
    let refused = TokenShards::open(&paths, 2).err().unwrap().to_string();
    assert!(refused.contains(&format!("{}: token id 7 is past the 3 characters", shard(1).display())), "{refused}");
    std::fs::write(dir.path().join(VOCABULARY_FILE), "abcdefgb").unwrap();
    let twice = TokenShards::open(&paths, 2).err().unwrap().to_string();
    assert!(twice.contains("vocabulary.txt: has 'b' as token 1 and token 7"), "{twice}");
    std::fs::write(dir.path().join(VOCABULARY_FILE), b"ab\xe9").unwrap();
    let latin1 = TokenShards::open(&paths, 2).err().unwrap().to_string();
    assert!(latin1.contains("vocabulary.txt: not UTF-8 text (invalid at byte 2)"), "{latin1}");
    std::fs::remove_file(dir.path().join(VOCABULARY_FILE)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join(VOCABULARY_FILE)).unwrap();
    let device = TokenShards::open(&paths, 2).err().unwrap().to_string();
    assert!(device.contains("vocabulary.txt: a character device, not a file"), "{device}");
    std::fs::remove_file(dir.path().join(VOCABULARY_FILE)).unwrap();
    // A shard must hold a sample: a token and its next one.
    let one = prepare_characters("to be or not to be", &dir.path().join("ones"), "one", 1).unwrap_err().to_string();
    assert!(one.contains("shards of 1 token(s) hold no sample"), "{one}");
}

#[test]
fn malformed_shards_are_refused_naming_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.bin");
    let mut bytes = vec![0u8; HEADER_INTS * 4 + 6];
    bytes[..4].copy_from_slice(&7i32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let refused = read_shard(&path).unwrap_err().to_string();
    assert!(refused.contains("magic number 7, a token shard starts with 20240520") && !refused.contains("nanoGPT"));
    // nanoGPT's headerless files, by their names: what they are, and what to run instead.
    let nanogpt = dir.path().join("train.bin");
    std::fs::write(&nanogpt, &bytes).unwrap();
    let refused = read_shard(&nanogpt).unwrap_err().to_string();
    assert!(refused.contains("nanoGPT's train.bin and val.bin are bare uint16 tokens without one"), "{refused}");
    bytes[..4].copy_from_slice(&MAGIC.to_le_bytes());
    bytes[4..8].copy_from_slice(&2i32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    assert!(read_shard(&path).unwrap_err().to_string().contains("version 2, only version 1"));
    bytes[4..8].copy_from_slice(&VERSION.to_le_bytes());
    bytes[8..12].copy_from_slice(&5i32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = read_shard(&path).unwrap_err().to_string();
    assert!(err.contains("the header counts 5 tokens (10 bytes), the file holds 6 bytes after it"), "{err}");
    bytes.extend_from_slice(&[0; 5]);
    std::fs::write(&path, &bytes).unwrap();
    let err = read_shard(&path).unwrap_err().to_string();
    assert!(err.contains("the header counts 5 tokens (10 bytes), the file holds 11 bytes after it"), "{err}");
    std::fs::write(&path, b"short").unwrap();
    assert!(read_shard(&path).unwrap_err().to_string().contains("5 bytes, shorter than the 1024-byte header"));
    // A device that never ends is refused at its header, not read until memory runs out.
    let err = read_shard(Path::new("/dev/zero")).unwrap_err().to_string();
    assert!(err.contains("/dev/zero: magic number 0"), "{err}");
    write_shard(&path, &[1, 2]).unwrap();
    assert!(TokenShards::open(&[path], 4).err().unwrap().to_string().contains("2 tokens, too few for one sample of 4"));
}

#[test]
fn a_prepared_text_is_found_split_and_decodes_back() {
    let dir = tempfile::tempdir().unwrap();
    let text = "to be or not to be, ".repeat(50);
    let prepared = prepare_characters(&text, dir.path(), "play", 300).unwrap();
    assert_eq!(prepared.vocabulary.as_deref(), Some(" ,benort"));
    assert_eq!((prepared.train_tokens, prepared.val_tokens), (900, 100));
    assert_eq!(prepared.train.len(), 3, "900 tokens in shards of 300");
    let (train, val) = locate(dir.path()).unwrap();
    assert_eq!((train, val.clone()), (prepared.train.clone(), prepared.val.clone()));
    assert_eq!(locate(&prepared.train[0]).unwrap(), (vec![prepared.train[0].clone()], prepared.val.clone()));
    assert_eq!(locate(&prepared.train[1]).unwrap().1, Vec::<PathBuf>::new(), "no val_000001 beside train_000001");
    let other = dir.path().join("poem_train.bin");
    write_shard(&other, &[1; 20]).unwrap();
    let mixed = locate(dir.path()).unwrap_err().to_string();
    assert!(mixed.contains(r#"holds shards of 2 names ("play", "poem")"#), "{mixed}");
    std::fs::remove_file(other).unwrap();
    let missing = locate(&dir.path().join("nothing.bin")).unwrap_err().to_string();
    assert!(missing.contains("nothing.bin") && missing.contains("No such file or directory"), "{missing}");
    let set = TokenShards::open(&val, 8).unwrap();
    assert_eq!(set.vocabulary().as_deref(), Some(" ,benort"));
    let chars: Vec<char> = prepared.vocabulary.unwrap().chars().collect();
    let decoded: String = read_shard(&val[0]).unwrap().iter().map(|&t| chars[usize::from(t)]).collect();
    assert_eq!(decoded, text.chars().skip(900).collect::<String>());

    // 900 tokens in shards of at most 890: two of 450, not one of 890 and one of 10.
    let even = tempfile::tempdir().unwrap();
    let prepared = prepare_characters(&text, even.path(), "play", 890).unwrap();
    let sizes: Vec<usize> = prepared.train.iter().map(|p| read_shard(p).unwrap().len()).collect();
    assert_eq!(sizes, [450, 450]);
    // 900 in shards of at most 7: 129 shards of 6 or 7 tokens, never one of 4 at the end.
    let small = tempfile::tempdir().unwrap();
    let many = prepare_characters(&text, small.path(), "play", 7).unwrap();
    let sizes: Vec<usize> = many.train.iter().map(|p| read_shard(p).unwrap().len()).collect();
    assert_eq!((sizes.len(), sizes.iter().sum::<usize>()), (129, 900));
    assert!(sizes.iter().all(|&n| n == 6 || n == 7), "{sizes:?}");
    // Shards of 2 from a text whose training split is odd (899 tokens): never one of a single
    // token, which holds no sample; an odd split has one shard of 3.
    let pairs = tempfile::tempdir().unwrap();
    let odd: String = text.chars().take(999).collect();
    let twos = prepare_characters(&odd, pairs.path(), "play", 2).unwrap();
    for split in [&twos.train, &twos.val] {
        let sizes: Vec<usize> = split.iter().map(|p| read_shard(p).unwrap().len()).collect();
        assert!(sizes.iter().all(|&n| n == 2 || n == 3), "{sizes:?}");
    }
    let train: usize = twos.train.iter().map(|p| read_shard(p).unwrap().len()).sum();
    assert_eq!(train, 899, "an odd split, as the check needs");
    // Ten characters hold one held-out token: no shard for it, rather than one holding no sample.
    let tiny = tempfile::tempdir().unwrap();
    let ten = prepare_characters("abcdefghij", tiny.path(), "ten", 2).unwrap();
    assert_eq!((ten.train_tokens, ten.val.len(), ten.val_tokens), (9, 0, 0));

    // A token past the vocabulary saved beside the shards stands for no character.
    let mut tokens = read_shard(&prepared.train[0]).unwrap();
    tokens[3] = 8;
    write_shard(&prepared.train[0], &tokens).unwrap();
    let past = TokenShards::open(&prepared.train, 8).err().unwrap().to_string();
    assert!(past.contains("token id 8 is past the 8 characters of") && past.contains("vocabulary.txt"), "{past}");
}

#[test]
fn prepared_tokens_are_written_as_given_with_no_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let tokens: Vec<u16> = (0..100u16).map(|i| 50256 - i * 7).collect();
    let prepared = prepare_tokens(&tokens, dir.path(), "gpt2", 40).unwrap();
    assert_eq!((prepared.vocabulary, prepared.train_tokens, prepared.val_tokens), (None, 90, 10));
    let written: Vec<u16> = prepared.train.iter().chain(&prepared.val).flat_map(|s| read_shard(s).unwrap()).collect();
    assert_eq!(written, tokens);
    assert_eq!(prepared.train.len(), 3, "90 tokens in shards of at most 40");
    assert!(!dir.path().join(VOCABULARY_FILE).exists());
    assert_eq!(TokenShards::open(&prepared.val, 4).unwrap().vocabulary(), None);
    let short = prepare_tokens(&[1, 2], &dir.path().join("short"), "s", 40).unwrap_err().to_string();
    assert!(short.contains("2 token(s): their first 90% (1 token(s)) cannot make one training sample"), "{short}");
}

#[test]
fn a_shard_s_split_is_the_last_part_of_its_name() {
    let split = |name: &str| split_part(name).map(|(_, train)| if train { "train" } else { "val" });
    for (name, want) in [
        ("fineweb_train_000001.bin", Some("train")),
        ("tiny_shakespeare_val.bin", Some("val")),
        ("TinyStories-train.bin", Some("train")),
        ("train.bin", Some("train")),
        // Texts whose names hold the words, prepared: the split is the last part.
        ("train_val_000000.bin", Some("val")),
        ("interval_train_000000.bin", Some("train")),
        ("training_notes_val_000000.bin", Some("val")),
        ("interval.bin", None),
        ("val_notes.bin", None),
        ("000001.bin", None),
        ("train.txt", None),
    ] {
        assert_eq!(split(name), want, "{name}");
    }
}

#[test]
fn numbered_shards_are_read_in_the_order_of_their_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["x_train_10.bin", "x_train_9.bin", "x_train_1000000.bin", "x_train_999999.bin", "x_val_2.bin"];
    for name in names {
        write_shard(&dir.path().join(name), &[1, 2, 3]).unwrap();
    }
    let (train, val) = locate(dir.path()).unwrap();
    let file_names = |paths: &[PathBuf]| -> Vec<String> {
        paths.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
    };
    assert_eq!(file_names(&train), ["x_train_9.bin", "x_train_10.bin", "x_train_999999.bin", "x_train_1000000.bin"]);
    assert_eq!(file_names(&val), ["x_val_2.bin"]);
}

#[test]
fn shards_of_texts_named_like_splits_are_found_in_their_own_split() {
    let dir = tempfile::tempdir().unwrap();
    let text = "to be or not to be, ".repeat(50);
    let prepared = prepare_characters(&text, dir.path(), "train", 1000).unwrap();
    let (train, val) = locate(dir.path()).unwrap();
    assert_eq!((&train, &val), (&prepared.train, &prepared.val), "train_train_* and train_val_*");
    assert_eq!(locate(&train[0]).unwrap(), (train.clone(), val), "the val shard beside train_train_000000");
    let other = tempfile::tempdir().unwrap();
    let prepared = prepare_characters(&text, other.path(), "interval", 1000).unwrap();
    assert_eq!(locate(other.path()).unwrap(), (prepared.train, prepared.val));
    // Another text's shards beside these would be read with this vocabulary: refused.
    let again = prepare_characters("abc", other.path(), "other", 1000).unwrap_err().to_string();
    assert!(
        again.contains("already holds token shards or a vocabulary (interval_train_000000.bin, 3 file(s)"),
        "{again}"
    );
}

#[test]
fn a_text_too_short_to_train_on_or_a_name_that_is_a_path_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("shards");
    let short = prepare_characters("x", &out, "one", 1000).unwrap_err().to_string();
    assert!(short.contains("1 character(s): their first 90% (0 token(s)) cannot make one training"), "{short}");
    for name in ["../escape", "a/b", "..", ""] {
        let refused = prepare_characters("to be or not to be", &out, name, 1000).unwrap_err().to_string();
        let asked = if name.is_empty() { "give a name (no `/`)" } else { "give a plain name (no `/`)" };
        assert!(refused.contains(asked), "{name}: {refused}");
    }
    assert!(!out.exists() && std::fs::read_dir(dir.path()).unwrap().count() == 0, "nothing was written");
    // A file where the shards' folder should be is named, and kept.
    std::fs::write(&out, b"the text").unwrap();
    let refused = prepare_characters("to be or not to be", &out, "one", 1000).unwrap_err().to_string();
    assert!(refused.contains("shards: exists and is not a folder; the shards go into a folder"), "{refused}");
    assert_eq!(std::fs::read(&out).unwrap(), b"the text");
}

/// Shards are written into a staging folder and moved out once whole: what an interrupted run
/// leaves is refused by `--tokens` (`locate`) until a new run of `prepare` replaces it, and a run
/// that fails while writing leaves nothing.
#[test]
fn an_unfinished_prepare_leaves_no_dataset_and_a_new_run_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("shards");
    let text = "to be or not to be, that is the question";
    // What a run interrupted while writing its second shard leaves.
    let staging = out.join(".prepare-hamlet.partial");
    std::fs::create_dir_all(&staging).unwrap();
    write_shard(&staging.join("hamlet_train_000000.bin"), &[1, 2, 3]).unwrap();
    std::fs::write(staging.join("hamlet_train_000001.partial"), [0u8; 7]).unwrap();
    let refused = locate(&out).unwrap_err().to_string();
    assert!(refused.contains("a `prepare` that did not finish"), "{refused}");
    assert!(refused.contains(".prepare-hamlet.partial"), "{refused}");
    let one_file = locate(&out.join("hamlet_train_000000.bin")).unwrap_err().to_string();
    assert!(one_file.contains("a `prepare` that did not finish"), "a shard beside it too: {one_file}");
    // Another name's shards beside it would be refused as well: not written.
    let other_name = prepare_characters(text, &out, "macbeth", 8).unwrap_err().to_string();
    assert!(other_name.contains("which a `prepare` of other shards that did not finish left"), "{other_name}");
    assert!(!out.join(".prepare-macbeth.partial").exists() && staging.exists());
    // Run again, it begins anew, and leaves only the finished shards and the vocabulary.
    let prepared = prepare_characters(text, &out, "hamlet", 8).unwrap();
    assert!(!staging.exists());
    let (train, val) = locate(&out).unwrap();
    assert_eq!((train, val), (prepared.train.clone(), prepared.val.clone()));
    let mut names: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names.len(), prepared.train.len() + prepared.val.len() + 1, "{names:?}");
    assert!(names.iter().all(|n| n.ends_with(".bin") || n == VOCABULARY_FILE), "{names:?}");
    // A run that cannot write its staging folder (a file stands there) leaves nothing new.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join(".prepare-hamlet.partial"), b"not a folder").unwrap();
    let failed = prepare_characters(text, &other, "hamlet", 8).unwrap_err().to_string();
    assert!(failed.contains(".prepare-hamlet.partial"), "{failed}");
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1, "only the file that was there");
}

/// Shards on disk are read window by window, nothing of them held in memory; a pipe is read
/// whole. Both give the same samples and the same fingerprint, over a shard longer than one scan
/// chunk with its largest id past the first; a shard cut short after it was opened is an error
/// at the batch that reads past its end, naming it.
#[test]
fn shards_are_read_where_they_lie_and_a_pipe_whole() {
    let _children = crate::test_children::one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let count = 3 * reader_chunk_tokens() / 2;
    let mut tokens: Vec<u16> = (0..count).map(|i| (i * 7 % 50) as u16).collect();
    tokens[count - 10] = 999;
    let on_disk = dir.path().join("x_train.bin");
    write_shard(&on_disk, &tokens).unwrap();
    let mut file = TokenShards::open(std::slice::from_ref(&on_disk), 64).unwrap();
    assert_eq!((file.tokens(), file.tokens_in_memory()), (count, 0));
    assert_eq!(file.max_token(), (999, on_disk.as_path()));

    let fifo = dir.path().join("pipe_train.bin");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let (bytes, writer_end) = (std::fs::read(&on_disk).unwrap(), fifo.clone());
    let writer = std::thread::spawn(move || std::fs::write(writer_end, bytes).unwrap());
    let mut piped = TokenShards::open(std::slice::from_ref(&fifo), 64).unwrap();
    writer.join().unwrap();
    assert_eq!((piped.tokens(), piped.tokens_in_memory()), (count, count));
    assert_eq!(piped.fingerprint(), file.fingerprint(), "the same tokens, the same fingerprint");

    let (mut from_file, mut from_pipe) = (Batch::default(), Batch::default());
    let last_windows = (count as u64 - 1) / 64 - 3;
    for first in [0, 1000, last_windows] {
        file.fill(first, 3, &mut from_file).unwrap();
        piped.fill(first, 3, &mut from_pipe).unwrap();
        assert_eq!(from_file.inputs.as_slice(), from_pipe.inputs.as_slice(), "windows from {first}");
        assert_eq!(from_file.labels, from_pipe.labels, "windows from {first}");
        let at = first as usize * 64;
        let expected: Vec<f32> = tokens[at..at + 3 * 64].iter().map(|&t| f32::from(t)).collect();
        assert_eq!(from_file.inputs.as_slice(), expected.as_slice(), "windows from {first}");
    }

    // A header counting more than a pipe is read for (here followed by nothing) is refused at it.
    let mut header = std::fs::read(&on_disk).unwrap()[..HEADER_INTS * 4].to_vec();
    header[8..12].copy_from_slice(&i32::MAX.to_le_bytes());
    let writer = std::thread::spawn(move || std::fs::write(fifo, header).unwrap());
    let refused = TokenShards::open(std::slice::from_ref(&dir.path().join("pipe_train.bin")), 64).map(drop);
    writer.join().unwrap();
    let refused = refused.unwrap_err().to_string();
    assert!(
        refused.contains("its header counts 2147483647 tokens (4294967294 bytes), more than the 1024 MiB"),
        "{refused}"
    );

    let cut = std::fs::OpenOptions::new().write(true).open(&on_disk).unwrap();
    cut.set_len((HEADER_INTS * 4 + count) as u64).unwrap();
    let error = file.fill(last_windows, 3, &mut from_file).unwrap_err().to_string();
    assert!(error.contains(&on_disk.display().to_string()), "{error}");
}

/// Tokens in one chunk of the scan at `open`.
fn reader_chunk_tokens() -> usize {
    reader::SCAN_CHUNK / 2
}
