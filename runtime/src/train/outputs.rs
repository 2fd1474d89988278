//! The files and folders a run writes, checked and claimed before step 1: none unwritable, none
//! named twice, none one the data is read from or one of a checkpoint folder's own; the checkpoint
//! folder locked for the run.

use std::path::PathBuf;

use crate::checkpoint;
use crate::config::TrainConfig;
use crate::error::{Error, Result};
use crate::process::output_paths::{self, identity};

/// The outputs' folders, held for the run: the checkpoint folder's lock (which removes the folder
/// again if the run ends having saved nothing there).
#[derive(Debug, Default)]
pub(super) struct ClaimedOutputs {
    pub checkpoint_folder: Option<checkpoint::DirLock>,
}

/// Every file and folder the run will write, checked before step 1, none of them one of the
/// `inputs` the data is read from; the checkpoint folder is claimed (locked, and refused if it
/// holds another run's checkpoints).
pub(super) fn claim_outputs(config: &TrainConfig, inputs: &[PathBuf]) -> Result<ClaimedOutputs> {
    let mut made = output_paths::MadeFolders::default();
    for (path, what) in config.output_files() {
        made.extend(output_paths::check_file(path, what)?);
    }
    crate::process::console::keep_stdout_for(config.output_files().map(|(path, _)| path));
    distinct_outputs(config, inputs)?;
    // The folders made to check the output files go again now, while they are empty: a rank that
    // MPI_Abort kills (another rank failed) cannot remove them later, and the file's writer makes
    // its folder when it writes (`write_atomically`).
    drop(made);
    let Some(save) = &config.save else { return Ok(ClaimedOutputs { checkpoint_folder: None }) };
    let continues = config.resume.as_deref().is_some_and(|r| identity(r) == identity(&save.dir));
    let lock = checkpoint::claim(&save.dir, continues, save.overwrite, config.steps)?;
    Ok(ClaimedOutputs { checkpoint_folder: Some(lock) })
}

/// Two outputs of one run never name the same file, none is a file the data is read from
/// (`inputs`), and none lies in a checkpoint folder (the one saved to, the one resumed from),
/// whose files are the checkpoints' own (`latest`, the step folders, the lock): refused before
/// step 1, when nothing is lost yet, rather than one result silently replacing another.
fn distinct_outputs(config: &TrainConfig, inputs: &[PathBuf]) -> Result<()> {
    let files: Vec<(PathBuf, &str)> = config.output_files().map(|(p, what)| (identity(p), what)).collect();
    let inputs: Vec<PathBuf> = inputs.iter().map(|p| identity(p)).collect();
    if let Some((path, what)) = config.output_files().find(|(p, _)| inputs.contains(&identity(p))) {
        return Err(Error::Config(format!(
            "{what} {} is a file the training data is read from: the run would write over it; give another file",
            path.display()
        )));
    }
    for (k, (path, what)) in files.iter().enumerate() {
        if let Some((_, other)) = files[..k].iter().find(|(p, _)| p == path) {
            return Err(Error::Config(format!(
                "{other} and {what} both name {}: one would replace the other; give each its own file",
                path.display()
            )));
        }
    }
    let folders = [
        config.save.as_ref().map(|s| (&s.dir, "`SaveConfig::dir`")),
        config.resume.as_ref().map(|dir| (dir, "`TrainConfig::resume`")),
    ];
    for (folder, setting) in folders.into_iter().flatten() {
        let folder = identity(folder);
        if let Some((path, what)) = files.iter().find(|(p, _)| p.starts_with(&folder)) {
            return Err(Error::Config(format!(
                "{what} {} is in the checkpoint folder {} ({setting}), whose files are the checkpoints' own: write \
                 it elsewhere",
                path.display(),
                folder.display()
            )));
        }
    }
    // Nor checkpoints inside another run's: that run's next save would remove them as its own
    // leftovers.
    if let Some(save) = &config.save {
        if let Some(folder) = checkpoint::owner_folder(&save.dir) {
            return Err(Error::Config(format!(
                "`SaveConfig::dir` {} is inside the checkpoint folder {}, whose files are its checkpoints' own (its \
                 next save would remove yours): save elsewhere",
                save.dir.display(),
                folder.display()
            )));
        }
    }
    // Nor over another run's checkpoint files: `--save-params ck/latest` would leave that run
    // unable to resume (other files beside them are no checkpoint's).
    for (path, what) in &files {
        if let Some(folder) = checkpoint::owner_folder(path) {
            return Err(Error::Config(format!(
                "{what} {} is one of the checkpoint folder {}'s own files: write it elsewhere",
                path.display(),
                folder.display()
            )));
        }
    }
    Ok(())
}
