//! The few words of a command line read before it is parsed: a shape flag's value, a start
//! file, whether help or the version is asked for. Read as clap reads them: the last of a
//! repeated flag wins, `--flag V` or `--flag=V`, and non-UTF-8 words (file names) kept intact.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The value of the last `--flag V` or `--flag=V` in `argv` (program name first); an empty
/// value where the flag ends the line.
pub(super) fn last_value(argv: &[OsString], flag: &str) -> Option<OsString> {
    let mut found = None;
    for (at, word) in argv.iter().enumerate().skip(1) {
        if word.as_os_str() == OsStr::new(flag) {
            found = Some(argv.get(at + 1).cloned().unwrap_or_default());
        } else if let Some(value) = word.as_bytes().strip_prefix(flag.as_bytes()).and_then(|r| r.strip_prefix(b"=")) {
            found = Some(OsStr::from_bytes(value).to_owned());
        }
    }
    found
}

/// Whether `argv` asks for `--help` or `--version` (`-h`, `-V`), which clap answers whatever
/// else the line says.
pub(super) fn asks_help_or_version(argv: &[OsString]) -> bool {
    argv.iter().skip(1).any(|w| ["-h", "--help", "-V", "--version"].iter().any(|h| w.as_os_str() == OsStr::new(h)))
}

/// `argv` with `words` inserted right after the program's name, so that a flag left without its
/// value at the end of the line still reads as the user typed it.
pub(super) fn with_leading(mut argv: Vec<OsString>, words: Vec<OsString>) -> Vec<OsString> {
    let at = argv.len().min(1);
    argv.splice(at..at, words);
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        std::iter::once("gpt").chain(words.iter().copied()).map(OsString::from).collect()
    }

    #[test]
    fn the_last_value_wins_in_either_spelling() {
        let line = argv(&["--layers", "6", "--text", "t", "--layers=4"]);
        assert_eq!(last_value(&line, "--layers"), Some("4".into()));
        assert_eq!(last_value(&argv(&["--layers"]), "--layers"), Some(OsString::new()));
        assert_eq!(last_value(&argv(&["--layersx", "6"]), "--layers"), None);
        assert_eq!(last_value(&argv(&["--layers="]), "--layers"), Some(OsString::new()));
        // The program's own name is no flag.
        assert_eq!(last_value(&[OsString::from("--layers")], "--layers"), None);
    }

    #[test]
    fn a_file_name_that_is_not_utf8_is_kept() {
        let name = OsStr::from_bytes(b"b\xff.st").to_owned();
        let mut line = argv(&["--steps", "0", "--init-params"]);
        line.extend([name.clone(), "--sample".into(), "5".into()]);
        assert_eq!(last_value(&line, "--init-params"), Some(name.clone()));
        let mut joined = b"--init-params=".to_vec();
        joined.extend_from_slice(name.as_bytes());
        assert_eq!(
            last_value(&[OsString::from("gpt"), OsStr::from_bytes(&joined).into()], "--init-params"),
            Some(name)
        );
    }

    #[test]
    fn help_and_version_are_seen_and_leading_words_go_first() {
        assert!(asks_help_or_version(&argv(&["--layers", "6", "-h"])));
        assert!(asks_help_or_version(&argv(&["--version"])));
        assert!(!asks_help_or_version(&argv(&["--layers", "6"])));
        let line = with_leading(argv(&["--sample"]), vec!["--layers".into(), "6".into()]);
        assert_eq!(line, argv(&["--layers", "6", "--sample"]));
    }
}
