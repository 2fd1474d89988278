//! Text from bytes that arrive in pieces: GPT-2's byte-level tokens split characters between
//! them, so a sample printed token by token must hold a character's first bytes until its last.

/// What stands for bytes that are no character: U+FFFD.
const REPLACEMENT: &str = "\u{FFFD}";

/// Bytes in, text out: each run of whole UTF-8 characters is handed on as soon as it is complete;
/// the start of a character waits for the rest. Bytes that cannot be part of a character become
/// U+FFFD, one for each maximal subpart of a character cut short and one for each byte that
/// starts none, as `String::from_utf8_lossy` replaces them: the text handed on is the lossy
/// decoding of all the bytes pushed, however they were split.
#[derive(Clone, Debug, Default)]
pub struct Utf8Stream {
    /// The first bytes of a character still incomplete.
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds `bytes`, handing `out` the text they complete.
    pub fn push(&mut self, bytes: &[u8], out: &mut impl FnMut(&str)) {
        self.pending.extend_from_slice(bytes);
        let mut done = 0;
        while done < self.pending.len() {
            let rest = &self.pending[done..];
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out(text);
                    done = self.pending.len();
                }
                Err(error) => {
                    let (text, _) = rest.split_at(error.valid_up_to());
                    if !text.is_empty() {
                        out(std::str::from_utf8(text).expect("valid up to here"));
                    }
                    match error.error_len() {
                        Some(bad) => {
                            out(REPLACEMENT);
                            done += text.len() + bad;
                        }
                        // A character's start, whose other bytes may come with the next piece.
                        None => {
                            done += text.len();
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..done);
    }

    /// Ends the stream: a character left incomplete becomes U+FFFD.
    pub fn finish(&mut self, out: &mut impl FnMut(&str)) {
        if !self.pending.is_empty() {
            self.pending.clear();
            out(REPLACEMENT);
        }
    }
}
