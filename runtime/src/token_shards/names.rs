//! What a shard's file name says (the split it holds), and the vocabulary file's name.

/// The file `prepare_characters` writes the vocabulary to, beside the shards: the characters
/// of token 0, 1, ..., as UTF-8.
pub const VOCABULARY_FILE: &str = "vocabulary.txt";

/// Where a shard's name says which split it holds, and which: the last part of its stem, parts
/// separated by `_`, `-` or `.`, not counting trailing numbers, is `train` or `val` (llm.c's
/// `fineweb_train_000001.bin`, `tiny_shakespeare_val.bin`). Only that part counts, so that the
/// shards `prepare` writes for `train.txt` or `interval.txt` (`train_val_000000.bin`,
/// `interval_train_000000.bin`) fall in the split their names end with.
pub(super) fn split_part(file_name: &str) -> Option<(std::ops::Range<usize>, bool)> {
    let stem = file_name.strip_suffix(".bin")?;
    let mut end = stem.len();
    loop {
        let start = stem[..end].rfind(['_', '-', '.']).map_or(0, |i| i + 1);
        let part = &stem[start..end];
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) && start > 0 {
            end = start - 1;
            continue;
        }
        return match part {
            "train" => Some((start..end, true)),
            "val" => Some((start..end, false)),
            _ => None,
        };
    }
}

/// The number after a shard's split part (`tiny_train_000002.bin`: 2), with its digits as they
/// are written; `None` for an unnumbered shard.
pub(super) fn shard_number(file_name: &str) -> Option<(u64, String)> {
    let (part, _) = split_part(file_name)?;
    let digits = file_name[part.end..].strip_suffix(".bin")?.trim_start_matches(['_', '-', '.']);
    Some((digits.parse().ok()?, digits.to_string()))
}
