use super::*;

fn table(pieces: &[&[u8]], end_of_text: usize) -> Vec<u8> {
    write_table(pieces, end_of_text).unwrap()
}

#[test]
fn a_written_table_reads_back() {
    let read = TokenTable::parse(&table(&[b"a", b" the", "é".as_bytes(), b"<|endoftext|>"], 3)).unwrap();
    assert_eq!((read.len(), read.end_of_text()), (4, 3));
    assert_eq!(
        [read.bytes(0), read.bytes(1), read.bytes(2), read.bytes(3)],
        [&b"a"[..], b" the", "é".as_bytes(), b"<|endoftext|>"]
    );
}

#[test]
fn version_1_is_gpt2s_table_with_its_last_token_end_of_text() {
    let pieces: Vec<Vec<u8>> = (0..GPT2_TOKENS).map(|i| i.to_string().into_bytes()).collect();
    let mut file = table(&pieces.iter().map(Vec::as_slice).collect::<Vec<_>>(), 0);
    file[4..8].copy_from_slice(&1u32.to_le_bytes());
    file[12..16].copy_from_slice(&0u32.to_le_bytes());
    let read = TokenTable::parse(&file).unwrap();
    assert_eq!((read.len(), read.end_of_text(), read.bytes(50256)), (GPT2_TOKENS, 50256, &b"50256"[..]));
    let mut small = table(&[b"a", b"b"], 1);
    small[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(TokenTable::parse(&small).unwrap_err(), "version 1 with 2 tokens: version 1 files hold GPT-2's 50257");
}

#[test]
fn malformed_files_are_refused_saying_what_is_wrong() {
    let good = table(&[b"ab", b"c"], 1);
    let with = |at: usize, value: u32| {
        let mut file = good.clone();
        file[at..at + 4].copy_from_slice(&value.to_le_bytes());
        TokenTable::parse(&file).unwrap_err()
    };
    assert_eq!(
        TokenTable::parse(&good[..100]).unwrap_err(),
        "100 bytes, shorter than the 1024-byte header of llm.c's tokenizer file"
    );
    assert!(with(0, 7).starts_with("starts with 7, not the magic 20240328"));
    assert!(with(0, 20240520).starts_with("a token shard (magic 20240520), not a tokenizer file"));
    assert_eq!(with(4, 3), "version 3; llm.c writes versions 1 and 2");
    assert_eq!(with(8, 0), "no tokens");
    assert_eq!(with(12, 2), "its end-of-text token is 2, past its 2 tokens");
    // A count past what the file could hold is refused before anything is set aside for it.
    assert_eq!(with(8, 3), "its header counts 3 tokens, but the 5 bytes after it hold 2 at most");
    assert_eq!(with(8, u32::MAX), "its header counts 4294967295 tokens, but the 5 bytes after it hold 2 at most");
    // Long tokens, the last one cut off whole: a count the bytes could hold, then no token.
    let long = table(&[b"abcdef", b"g", b"h"], 2);
    assert_eq!(TokenTable::parse(&long[..long.len() - 2]).unwrap_err(), "ends after 2 of its 3 tokens");
    assert_eq!(TokenTable::parse(&long[..1024 + 6]).unwrap_err(), "ends inside token 0, of 6 bytes");
    let mut empty_token = good.clone();
    empty_token[1024] = 0;
    assert_eq!(TokenTable::parse(&empty_token).unwrap_err(), "token 0 has no bytes (llm.c's tokens have at least one)");
    let long = [good.as_slice(), b"xy"].concat();
    assert_eq!(TokenTable::parse(&long).unwrap_err(), "2 bytes after the last of its 2 tokens");
    assert!(write_table(&[b"a", b""], 0).unwrap_err().contains("token 1 has 0 bytes"));
    assert!(write_table(&[b"a"], 1).unwrap_err().contains("end-of-text token 1 is past the 1 tokens"));
}

#[test]
fn read_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpt2_tokenizer.bin");
    assert!(matches!(TokenTable::read(&path), Err(Error::Io { path: p, .. }) if p == path));
    std::fs::write(&path, b"tiny").unwrap();
    let message = TokenTable::read(&path).unwrap_err().to_string();
    assert!(message.contains("gpt2_tokenizer.bin: 4 bytes, shorter than"), "{message}");
    std::fs::write(&path, table(&[b"x"], 0)).unwrap();
    assert_eq!(TokenTable::read(&path).unwrap().bytes(0), b"x");
}

#[test]
fn a_stream_hands_on_the_lossy_decoding_of_its_bytes_however_they_are_split() {
    // Whole and split characters of 2, 3 and 4 bytes, a stray continuation byte, a start cut
    // short by ASCII, two invalid bytes, a start cut short by another character's, and a
    // character left incomplete at the end.
    let bytes = [
        &b"a "[..],
        "é€𝄞".as_bytes(),
        &[0x80],
        b"x",
        &[0xe2, 0x82],
        b"y",
        &[0xff, 0xff],
        "ü".as_bytes(),
        &[0xf0, 0x9d, 0xe2, 0x82, 0xac],
        &[0xf0, 0x9d],
    ]
    .concat();
    let expected = String::from_utf8_lossy(&bytes).into_owned();
    for split in 1..=bytes.len() {
        for offset in 0..split {
            let mut stream = Utf8Stream::default();
            let mut text = String::new();
            let mut out = |s: &str| text.push_str(s);
            // Pieces of `split` bytes, the first of `offset` (none when 0).
            let inner = (offset..bytes.len()).step_by(split).filter(|&cut| cut > 0);
            let cuts: Vec<usize> = std::iter::once(0).chain(inner).chain([bytes.len()]).collect();
            for w in cuts.windows(2) {
                stream.push(&bytes[w[0]..w[1]], &mut out);
            }
            stream.finish(&mut out);
            assert_eq!(text, expected, "pieces of {split} from {offset}");
        }
    }
}

#[test]
fn a_stream_holds_a_characters_first_bytes_until_its_last() {
    let mut stream = Utf8Stream::default();
    let mut pieces = Vec::new();
    let mut out = |s: &str| pieces.push(s.to_string());
    let euro = "€".as_bytes();
    stream.push(&[b'a', euro[0]], &mut out);
    stream.push(&euro[1..2], &mut out);
    stream.push(&euro[2..], &mut out);
    stream.finish(&mut out);
    assert_eq!(pieces, ["a", "€"]);
}

/// A table of single bytes `a`, `b`, `c`, ` ` and joined ones, end-of-text last.
fn joining_table() -> TokenTable {
    let pieces: [&[u8]; 9] = [b"a", b"b", b"c", b" ", b"bc", b"ab", b"aa", b"a b", b"<|endoftext|>"];
    TokenTable::parse(&table(&pieces, 8)).unwrap()
}

#[test]
fn text_encodes_joining_the_pair_of_lowest_id_first() {
    let table = joining_table();
    // A piece that is a token whole is that token.
    assert_eq!(table.encode("ab").unwrap(), [5]);
    // `ab` (5) and `bc` (4) could join: `bc` does, the lower id, though `ab` is to its left.
    assert_eq!(table.encode("abc").unwrap(), [0, 4]);
    assert_eq!(table.encode("aab").unwrap(), [0, 5]);
    // Of two equal pairs, the leftmost joins: a|a|a -> aa|a; and a join makes new pairs: a|ab|c
    // would need `abc`, which is no token.
    assert_eq!(table.encode("aaa").unwrap(), [6, 0]);
    assert_eq!(table.encode("aaaab").unwrap(), [6, 0, 5]);
    // Pieces are split by GPT-2's pattern first: `a b` is a token, but ` b` is a piece of its own.
    assert_eq!(table.encode("a b").unwrap(), [0, 3, 1]);
    assert_eq!(table.encode("").unwrap(), Vec::<usize>::new());
}

#[test]
fn end_of_text_in_a_text_is_its_token() {
    assert_eq!(joining_table().encode("a<|endoftext|>b<|endoftext|>").unwrap(), [0, 8, 1, 8]);
    assert_eq!(joining_table().encode("<|endoftext|><|endoftext|>").unwrap(), [8, 8]);
    // Not a whole marker: ordinary text, here of bytes the table lacks.
    assert!(joining_table().encode("<|endoftext").unwrap_err().starts_with("byte 0x3c of \"<|\""));
}

#[test]
fn a_byte_no_token_stands_for_is_refused_by_name() {
    let refused = joining_table().encode("cab z").unwrap_err();
    assert!(refused.starts_with("byte 0x7a of \" z\" is no token of the tokenizer file"), "{refused}");
}
