//! `latest`, the file naming a folder's newest whole checkpoint: read back as a step directory's
//! name, and, when it names none (damaged, written over), what the folder still holds and how to
//! resume from it.

use std::path::Path;

use super::layout::{read_latest, step_of, LATEST, STATE_FILE};
use crate::error::{Error, Result};

/// The step directory `latest` names, which must be a plain `step-N` name. When it names none,
/// the error lists the whole checkpoints the folder still holds, and how to resume from one.
pub(super) fn latest_name(dir: &Path) -> Result<String> {
    let problem = match read_latest(dir) {
        Ok(name) => return Ok(name),
        Err(problem) => problem,
    };
    Err(Error::Checkpoint(format!("{problem}{}{}", other_whole_steps(dir, None), set_aside_note(dir))))
}

/// What to do with the checkpoints a replacing run set aside in `dir` and did not replace (it
/// ended before its first save): "" when there are none.
pub(super) fn set_aside_note(dir: &Path) -> String {
    let Some(aside) = super::layout::set_aside(dir) else { return String::new() };
    let (from, to) = (shell_word(&aside.display().to_string()), shell_word(&dir.display().to_string()));
    format!(
        "; a run that was to replace its checkpoints (`SaveConfig::overwrite`) ended before its first save and left \
         them in {}: the next run saving into the folder puts them back, or `mv {from}/* {to}/` does",
        aside.display()
    )
}

/// How to resume from the whole checkpoints `dir` holds besides `damaged` (the one `latest`
/// names, when it cannot be read back): "" when there are none.
pub(super) fn other_whole_steps(dir: &Path, damaged: Option<&str>) -> String {
    let path = dir.join(LATEST);
    let whole: Vec<String> = whole_steps(dir).into_iter().filter(|s| Some(s.as_str()) != damaged).collect();
    let Some(newest) = whole.last() else { return String::new() };
    let target = shell_word(&path.display().to_string());
    // What stands at `latest` when it is no plain file goes first: writing into a FIFO waits for
    // a reader, into a folder fails, through a link writes its target.
    let clear = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => format!("rm -r {target} && "),
        Ok(m) if !m.is_file() => format!("rm {target} && "),
        _ => String::new(),
    };
    let other = if damaged.is_some() { "other " } else { "" };
    format!(
        "; the folder holds {other}whole checkpoints ({}): to resume from one, write its name into {} \
         (`{clear}echo {newest} > {target}`)",
        whole.join(", "),
        path.display(),
    )
}

/// `word` as a shell reads it back: quoted unless it is plain.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The step directories of `dir` whose state file is whole (it is written last), oldest first.
pub(super) fn whole_steps(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut steps: Vec<(u64, String)> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| Some((step_of(&name)?, name)))
        .filter(|(_, name)| step_state(&dir.join(name)) == StepState::Whole)
        .collect();
    steps.sort();
    steps.into_iter().map(|(_, name)| name).collect()
}

/// What a step directory's state file, which a save writes last, says of the checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StepState {
    /// The state file is there and whole.
    Whole,
    /// A save killed before it finished: no state file, or a torn one.
    Partial,
    /// The state file cannot be read (permissions, an I/O error, a FIFO or a device in its
    /// place): it says neither.
    Unreadable,
}

/// What `step_dir`'s state file says of it.
pub(super) fn step_state(step_dir: &Path) -> StepState {
    match crate::process::input_files::read_regular_file(&step_dir.join(STATE_FILE)) {
        Ok(bytes) if serde_json::from_slice::<serde_json::Value>(&bytes).is_ok() => StepState::Whole,
        Ok(_) => StepState::Partial,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => StepState::Partial,
        Err(_) => StepState::Unreadable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latest_that_is_a_fifo_is_refused_without_waiting_for_a_writer() {
        let _children = crate::test_children::one_at_a_time();
        let ck = tempfile::tempdir().unwrap();
        std::fs::create_dir(ck.path().join("step-00000002")).unwrap();
        std::fs::write(ck.path().join("step-00000002").join(STATE_FILE), "{}").unwrap();
        let made = std::process::Command::new("mkfifo").arg(ck.path().join(LATEST)).status().unwrap();
        assert!(made.success());
        let err = latest_name(ck.path()).unwrap_err().to_string();
        assert!(err.contains("is a FIFO (named pipe), not a file naming a checkpoint"), "{err}");
        assert!(
            err.contains(&format!("`rm {0} && echo step-00000002 > {0}`", ck.path().join(LATEST).display())),
            "{err}"
        );
    }

    #[test]
    fn a_path_in_a_hint_is_quoted_for_the_shell_when_it_must_be() {
        assert_eq!(shell_word("ck/latest"), "ck/latest");
        assert_eq!(shell_word("my runs/ck/latest"), "'my runs/ck/latest'");
        assert_eq!(shell_word("it's/latest"), "'it'\\''s/latest'");
    }
}
