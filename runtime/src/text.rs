//! Character-level text as a `Dataset`, as nanoGPT's `shakespeare_char/prepare.py` makes it: the
//! vocabulary is the file's distinct characters, sorted; the first 90% of the text is for
//! training, the rest for validation (`held_out`). A sample is a window of `context` characters
//! from its split, with the next character of each position as its label. Which window sample
//! `i` is depends on `i` and the seed alone (nanoGPT draws random offsets), so each rank reads
//! its own shard of every step and a resumed or re-ranked run reads the same characters.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::data::{Batch, Dataset};
use crate::error::{Error, Result};
use crate::process::input_files::read_at_most;

/// The share of the text that is the training split (nanoGPT's `n = len(data); data[:int(n*0.9)]`).
const TRAIN_SHARE: f64 = 0.9;

/// The most read from a pipe or a device, which may never end (`/dev/zero`); a file is read whole.
const MAX_STREAMED_TEXT_BYTES: u64 = 1 << 30;

/// A UTF-8 text file's characters as nanoGPT's `prepare.py` reads them (`open(path, 'r')`,
/// Python's universal newlines): `\r\n` and a lone `\r` become `\n`, so that a file saved with
/// Windows line ends has nanoGPT's vocabulary and tokens.
pub fn read_text(path: &Path) -> Result<String> {
    read_text_within(path, MAX_STREAMED_TEXT_BYTES)
}

/// [`read_text`], reading no more than `limit` bytes from a pipe or a device (a file is read
/// whole): what a prompt reads, which need not be a gigabyte.
pub fn read_text_within(path: &Path, limit: u64) -> Result<String> {
    let bytes = read_at_most(path, limit)?.ok_or_else(|| {
        let most = match limit {
            l if l >= 1 << 30 && l.is_multiple_of(1 << 30) => format!("{} GiB", l >> 30),
            l if l >= 1 << 20 && l.is_multiple_of(1 << 20) => format!("{} MiB", l >> 20),
            l => format!("{l} bytes"),
        };
        Error::Dataset(format!(
            "{}: more than {most} from a pipe or device, the most read from one (an endless one such as \
             /dev/zero?); a larger text can be read from a file",
            path.display(),
        ))
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::Dataset(format!("{}: not UTF-8 text (invalid at byte {})", path.display(), e.utf8_error().valid_up_to()))
    })?;
    Ok(if text.contains('\r') { text.replace("\r\n", "\n").replace('\r', "\n") } else { text })
}

/// A text's characters as a `Dataset` of windows of `context` tokens (see the module): the
/// training split, or the validation split after `held_out`. Clones share the tokens.
#[derive(Clone)]
pub struct CharText {
    /// The sorted distinct characters; a token is an index into it.
    vocab: Arc<[char]>,
    tokens: Arc<[u32]>,
    /// Tokens `..train_end` are the training split, the rest the validation split.
    train_end: usize,
    /// The tokens this set's windows lie in: one of the splits.
    split: Range<usize>,
    context: usize,
    seed: u64,
    name: String,
    /// The file it was read from, if any (`Dataset::files`).
    file: Option<PathBuf>,
}

/// The sorted distinct characters of `text`: its vocabulary, a token being an index into it.
pub(crate) fn vocabulary(text: &str) -> Vec<char> {
    let mut vocab: Vec<char> = text.chars().collect();
    vocab.sort_unstable();
    vocab.dedup();
    vocab
}

/// The vocabulary of the UTF-8 file at `path` (read as `read_text` reads it), and nothing else: a
/// sample from a saved model needs its characters, not windows to train on, so a file of one
/// character serves.
pub fn file_vocabulary(path: &Path) -> Result<Vec<char>> {
    let vocab = vocabulary(&read_text(path)?);
    if vocab.is_empty() {
        return Err(Error::Dataset(format!("{}: empty: no characters, so no vocabulary", path.display())));
    }
    Ok(vocab)
}

impl CharText {
    /// Reads a UTF-8 text file (`read_text`) into windows of `context` characters.
    pub fn from_file(path: &Path, context: usize, seed: u64) -> Result<Self> {
        let read = read_text(path)?;
        if read.is_empty() && !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            // Each rank reads its own copy: a launcher gives standard input to rank 0 alone.
            return Err(Error::Dataset(format!(
                "{}: empty (under mpirun, standard input reaches rank 0 alone, and a pipe one process: give \
                 every rank a file)",
                path.display()
            )));
        }
        let text = CharText::new(&read, context, seed, &path.display().to_string())?;
        Ok(CharText { file: Some(path.to_path_buf()), ..text })
    }

    /// `text` into windows of `context` characters; `name` says where it came from.
    pub fn new(text: &str, context: usize, seed: u64, name: &str) -> Result<Self> {
        if context == 0 {
            return Err(Error::Config("a text sample needs a context of at least 1 character".into()));
        }
        let vocab = vocabulary(text);
        let tokens: Arc<[u32]> =
            text.chars().map(|c| vocab.binary_search(&c).expect("in the vocabulary") as u32).collect();
        let train_end = (tokens.len() as f64 * TRAIN_SHARE) as usize;
        if train_end <= context {
            return Err(Error::Dataset(format!(
                "{name}: {} character(s), of which {train_end} for training: too few for one sample of {context} \
                 characters and its next one",
                tokens.len()
            )));
        }
        let (vocab, split) = (vocab.into(), 0..train_end);
        Ok(CharText { vocab, tokens, train_end, split, context, seed, name: name.to_string(), file: None })
    }

    /// The validation split (the text's last 10%) as a set of its own: the same vocabulary and
    /// context, windows drawn from that split by index as the training ones are.
    pub fn held_out(&self) -> Result<CharText> {
        let split = self.train_end..self.tokens.len();
        if split.len() <= self.context {
            return Err(Error::Dataset(format!(
                "{}: the validation split (the last {} characters) is too short for one sample of {} characters and \
                 its next one",
                self.name,
                split.len(),
                self.context
            )));
        }
        Ok(CharText { split, name: format!("{} (validation split)", self.name), ..self.clone() })
    }

    /// The sorted distinct characters.
    pub fn vocab(&self) -> &[char] {
        &self.vocab
    }

    /// Characters per sample.
    pub fn context(&self) -> usize {
        self.context
    }

    /// The characters of `tokens`; an id past the vocabulary (which no model trained on this
    /// text predicts) is shown as U+FFFD, as a lossy UTF-8 decoder shows a byte it cannot read.
    pub fn decode(&self, tokens: impl IntoIterator<Item = usize>) -> String {
        tokens.into_iter().map(|t| self.vocab.get(t).copied().unwrap_or(char::REPLACEMENT_CHARACTER)).collect()
    }

    /// The offset of sample `index` in the text: in its split, by a SplitMix64 hash of the seed
    /// and index.
    fn offset(&self, index: u64) -> usize {
        let mut z = self.seed.wrapping_add(index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        self.split.start + (z % (self.split.len() - self.context) as u64) as usize
    }
}

impl Dataset for CharText {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> Result<()> {
        let t = self.context;
        batch.inputs.resize(rows * t, 1);
        batch.labels.clear();
        let inputs = batch.inputs.as_mut_slice();
        for s in 0..rows {
            let at = self.offset(first.wrapping_add(s as u64));
            for (i, &token) in self.tokens[at..at + t].iter().enumerate() {
                inputs[s * t + i] = token as f32;
            }
            batch.labels.extend(self.tokens[at + 1..at + t + 1].iter().map(|&x| x as usize));
        }
        Ok(())
    }

    fn features(&self) -> usize {
        1
    }

    fn positions(&self) -> usize {
        self.context
    }

    fn vocabulary(&self) -> Option<String> {
        Some(self.vocab.iter().collect())
    }

    fn token_count(&self) -> Option<usize> {
        Some(self.vocab.len())
    }

    fn fingerprint(&self) -> Option<u64> {
        let mut hash = crate::content_hash::ContentHash::new();
        hash.u32s(self.vocab.iter().map(|&c| u32::from(c)));
        // The tokens its windows read: the training and the validation split each their own.
        hash.u32s(self.tokens[self.split.clone()].iter().copied());
        for n in [self.split.start, self.split.end, self.context] {
            hash.u64(n as u64);
        }
        hash.u64(self.seed);
        Some(hash.finish())
    }

    fn describe(&self) -> String {
        format!(
            "{}: {} characters ({} distinct), windows of {} from characters {}..{} (seed {})",
            self.name,
            self.tokens.len(),
            self.vocab.len(),
            self.context,
            self.split.start,
            self.split.end,
            // The seed places the windows: a resumed run with another reads other samples.
            self.seed
        )
    }

    fn files(&self) -> Vec<PathBuf> {
        self.file.iter().cloned().collect()
    }
}

/// Where a vocabulary (token `i` its `i`-th character) has a character twice, which would make
/// two token ids one character: `has 'a' as token 0 and token 2 (...)`.
pub fn repeated_character(vocabulary: &str) -> Option<String> {
    let mut first = std::collections::HashMap::new();
    for (token, c) in vocabulary.chars().enumerate() {
        if let Some(earlier) = first.insert(c, token) {
            return Some(format!(
                "has {c:?} as token {earlier} and token {token}: token i is its i-th character, so each character \
                 may appear once"
            ));
        }
    }
    None
}

/// The first token id at which vocabularies `a` and `b` differ: where their characters do, or
/// where the shorter ends.
pub fn first_difference(a: &[char], b: &[char]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()))
}

/// Why token ids saved with vocabulary `saved` mean other characters in `now`; `None` when the
/// two are the same.
pub fn vocabulary_mismatch(saved: &str, now: &str) -> Option<String> {
    if saved == now {
        return None;
    }
    let (a, b): (Vec<char>, Vec<char>) = (saved.chars().collect(), now.chars().collect());
    let first = first_difference(&a, &b);
    // Texts are read with `\r\n` as `\n` (`read_text`), as they were not before.
    let line_ends = if a.contains(&'\r') && !b.contains(&'\r') {
        " (the saved vocabulary has '\\r': it was made when line ends were read as they are in the file; \
         texts are now read as Python reads them, `\\r\\n` as `\\n`, so that run cannot be continued on this text)"
    } else {
        ""
    };
    // At most 10 named: a text in another script may add thousands.
    let listed = |v: &[char]| {
        let named: Vec<String> = v.iter().take(10).map(|c| format!("{c:?}")).collect();
        let more = if v.len() > 10 { format!(" and {} more", v.len() - 10) } else { String::new() };
        format!("{}{more}", named.join(", "))
    };
    let why = if first == a.len() {
        // The saved characters keep their ids; the model never trained on the others.
        format!("it adds {} (token {first} on), which the saved model has not learned", listed(&b[first..]))
    } else if first == b.len() {
        format!("it lacks {} (token {first} on) of the saved vocabulary", listed(&a[first..]))
    } else {
        let (was, is) = (a[first], b[first]);
        format!("token {first} was {was:?}, it is {is:?} here, so the token ids would mean other characters")
    };
    let counts = if a.len() == b.len() {
        format!("the saved vocabulary and this data's have {} characters each, not the same ones", a.len())
    } else {
        format!("a vocabulary of {} characters was saved and this data has {}", a.len(), b.len())
    };
    Some(format!("{counts}: {why}{line_ends}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_split_is_fingerprinted_by_the_tokens_it_reads() {
        let text = "abcdefghij".repeat(10);
        let mut other = text.clone();
        other.replace_range(95..96, "a"); // In the last 10%: the validation split.
        let (a, b) = (CharText::new(&text, 4, 1, "a").unwrap(), CharText::new(&other, 4, 1, "b").unwrap());
        assert_eq!(a.fingerprint(), b.fingerprint(), "the same training tokens");
        assert_ne!(a.held_out().unwrap().fingerprint(), b.held_out().unwrap().fingerprint());
        other.replace_range(5..6, "a");
        assert_ne!(a.fingerprint(), CharText::new(&other, 4, 1, "c").unwrap().fingerprint());
    }

    #[test]
    fn line_ends_are_read_as_python_reads_a_text_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crlf.txt");
        std::fs::write(&path, "a\r\nb\rc\n\r\n\r\rd\r").unwrap();
        // What `open(path, 'r').read()` gives in Python 3.11.
        assert_eq!(read_text(&path).unwrap(), "a\nb\nc\n\n\n\nd\n");
        // A vocabulary saved when `\r` was a character says why it no longer is.
        let why = vocabulary_mismatch("\n\rab", "\nab").unwrap();
        assert!(why.contains("texts are now read as Python reads them"), "{why}");
        assert!(!vocabulary_mismatch("\nab", "\nac").unwrap().contains("Python"));
    }

    #[test]
    fn the_description_a_resumed_run_is_compared_by_names_the_seed() {
        let text = "hello world, hello text; ".repeat(8);
        let (a, b) = (CharText::new(&text, 6, 7, "t").unwrap(), CharText::new(&text, 6, 8, "t").unwrap());
        assert!(a.describe().ends_with("(seed 7)"), "{}", a.describe());
        assert_ne!(a.describe(), b.describe(), "other seeds read other windows");
    }

    #[test]
    fn windows_of_the_training_split_with_the_next_character_as_label() {
        let text = "hello world, hello text; ".repeat(8);
        let mut set = CharText::new(&text, 6, 7, "test").unwrap();
        assert_eq!(set.vocab().iter().collect::<String>(), " ,;dehlortwx");
        let mut batch = Batch::default();
        set.fill(3, 4, &mut batch).unwrap();
        assert_eq!((batch.inputs.rows(), batch.labels.len()), (24, 24));
        let train: Vec<char> = text.chars().take(set.train_end).collect();
        for s in 0..4 {
            let window: String = (0..6).map(|i| set.vocab()[batch.inputs.row(s * 6 + i)[0] as usize]).collect();
            let labels = set.decode(batch.labels[s * 6..s * 6 + 6].iter().copied());
            let at = set.offset(3 + s as u64);
            assert_eq!(window, train[at..at + 6].iter().collect::<String>());
            assert_eq!(labels, train[at + 1..at + 7].iter().collect::<String>(), "the next characters");
            assert!(at + 7 <= set.train_end, "within the training split");
        }
        // Sample 4 is the same window whichever batch reads it.
        let mut again = Batch::default();
        set.fill(4, 1, &mut again).unwrap();
        assert_eq!(again.inputs.as_slice(), &batch.inputs.as_slice()[6..12]);
    }

    #[test]
    fn the_held_out_set_reads_only_the_validation_split() {
        let text: String = (0..400).map(|i| char::from(b'a' + (i * 7 % 26) as u8)).collect();
        let set = CharText::new(&text, 5, 1, "test").unwrap();
        let mut held_out = set.held_out().unwrap();
        assert_eq!(held_out.vocab(), set.vocab());
        let mut batch = Batch::default();
        held_out.fill(0, 50, &mut batch).unwrap();
        for s in 0..50 {
            let at = held_out.offset(s as u64);
            assert!(at >= 360 && at + 6 <= 400, "window {s} at {at}: outside the last 10%");
        }
        let short = CharText::new(&"abcdefghij".repeat(5), 5, 1, "short").unwrap();
        let err = short.held_out().err().unwrap().to_string();
        assert!(err.contains("validation split (the last 5 characters) is too short"), "{err}");
    }

    #[test]
    fn vocabularies_that_differ_are_described_at_their_first_difference() {
        assert_eq!(vocabulary_mismatch("abc", "abc"), None);
        let why = vocabulary_mismatch(" abc", " abd").unwrap();
        assert!(why.contains("have 4 characters each, not the same ones: token 3 was 'c', it is 'd' here"), "{why}");
        let why = vocabulary_mismatch("ab", "abc~").unwrap();
        assert!(why.contains("this data has 4: it adds 'c', '~' (token 2 on), which the saved model has not"), "{why}");
        let why = vocabulary_mismatch("a", "abcdefghijklm").unwrap();
        assert!(
            why.contains("it adds 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k' and 2 more (token 1 on)"),
            "{why}"
        );
        let why = vocabulary_mismatch("abc", "ab").unwrap();
        assert!(why.contains("this data has 2: it lacks 'c' (token 2 on) of the saved vocabulary"), "{why}");
    }

    #[test]
    fn texts_too_short_or_not_utf8_are_refused_naming_why() {
        assert!(CharText::new("abc", 8, 0, "short").err().unwrap().to_string().contains("too few for one sample of 8"));
        let huge = CharText::new("abc", usize::MAX, 0, "short").err().unwrap().to_string();
        assert!(huge.contains(&format!("too few for one sample of {}", usize::MAX)), "{huge}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("latin1.txt");
        std::fs::write(&path, b"caf\xe9 au lait").unwrap();
        let err = CharText::from_file(&path, 2, 0).err().unwrap().to_string();
        assert!(err.contains("not UTF-8 text (invalid at byte 3)"), "{err}");
    }
}
