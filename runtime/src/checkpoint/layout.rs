//! The names in a checkpoint folder: the step directories (`step-00000010`, by the step a run
//! resumed from them starts at) and `latest`, the file naming the newest complete one. The save,
//! the load and the claim of a folder all go by these.

/// The file naming the newest complete step directory.
pub const LATEST: &str = "latest";

/// The name of the step directory of a checkpoint that resumes at `step`.
pub fn step_dir_name(step: u64) -> String {
    format!("step-{step:08}")
}

/// The step of a step directory's name; `None` for any other name (`latest`, a stray file, a
/// path).
pub fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix("step-")?.parse().ok()
}

/// Whether `dir` is a checkpoint folder: its `latest` names a step directory it holds.
pub fn is_checkpoint_folder(dir: &std::path::Path) -> bool {
    let named = std::fs::read(dir.join(LATEST)).ok().and_then(|b| String::from_utf8(b).ok());
    named.is_some_and(|name| step_of(name.trim()).is_some() && dir.join(name.trim()).is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_directories_are_named_by_their_step_and_nothing_else_is_one() {
        assert_eq!(step_dir_name(10), "step-00000010");
        assert_eq!(step_of(&step_dir_name(123_456_789)), Some(123_456_789));
        for other in [LATEST, "step-", "step-x", "step-1/..", "../step-1", "model.safetensors"] {
            assert_eq!(step_of(other), None, "{other}");
        }
    }
}
