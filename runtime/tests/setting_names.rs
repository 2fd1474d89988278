//! The library's messages name a run's settings as the fields of its config structs
//! (`config::SETTING_NAMES`), never as a command line's flags: the library has no command line,
//! and the one built on it (`overlap-cli`) maps the names to its flags when it prints them.

use std::path::{Path, PathBuf};

/// Options of other programs that the runtime passes on or suggests (NVRTC's, cargo's and
/// mpirun's in hints).
const NOT_OURS: &[&str] = &[
    "--gpu-architecture",
    "--std",
    "--features",
    "--release",
    "--examples",
    "--device-debug",
    "--map-by",
    "--bind-to",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `--word` spans in `line`, a flag's shape.
fn flags(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = line.as_bytes();
    for (i, _) in line.match_indices("--") {
        let before_ok = i == 0 || !bytes[i - 1].is_ascii_alphanumeric() && bytes[i - 1] != b'-';
        let word: String = line[i + 2..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '-').collect();
        if before_ok && word.len() > 1 && word.starts_with(|c: char| c.is_ascii_lowercase()) {
            found.push(format!("--{}", word.trim_end_matches('-')));
        }
    }
    found
}

#[test]
fn no_message_names_a_command_line_flag() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let mut offending = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests may use any label; comments may speak of the command line.
        let code = text.split("#[cfg(test)]").next().unwrap_or(&text);
        for (n, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for flag in flags(line).into_iter().filter(|f| !NOT_OURS.contains(&f.as_str())) {
                offending.push(format!("{}:{}: {flag}", file.display(), n + 1));
            }
        }
    }
    assert!(
        offending.is_empty(),
        "name the setting (config::SETTING_NAMES), not the flag:\n  {}",
        offending.join("\n  ")
    );
}

#[test]
fn the_flag_shape_is_found() {
    assert_eq!(flags(r#"format!("--accumulate {} with --batch {}")"#), ["--accumulate", "--batch"]);
    assert!(flags("a -- b, x--y, `TrainConfig::batch`").is_empty());
}
