//! Where a run starts: step 0, or the newest checkpoint of `--resume`, with a warning for each
//! setting that differs from the run that wrote it.

use crate::checkpoint::{self, Position};
use crate::config::TrainConfig;
use crate::error::{Error, Result};
use crate::model::DistributedModel;
use crate::optim::ChosenOptimizer;

/// Where training starts, and what a checkpoint brings besides parameters and optimizer state.
pub(super) struct Resumed {
    pub position: Position,
    /// This rank's PowerSGD state, if any, for the buckets.
    pub low_rank: Option<checkpoint::low_rank::Restored>,
    /// The vocabulary the checkpoint records, which the run's files keep where its data
    /// records none (token shards without `vocabulary.txt`): the ids still mean those characters.
    pub vocabulary: Option<String>,
    /// The positions of the sequences the checkpoint's parameters were trained on, which the
    /// run's files keep where this run's are fewer (`RunAbout::positions`).
    pub positions: Option<usize>,
}

/// Where training starts: step 0, or the newest checkpoint of `resume` (loaded into `model`
/// and `optimizer`; `steps_left` then checks it is before `steps`).
pub(super) fn resume<M: DistributedModel>(
    config: &TrainConfig,
    model: &mut M,
    optimizer: &mut ChosenOptimizer,
    (rank, world): (usize, usize),
    about: &checkpoint::RunAbout,
) -> Result<Resumed> {
    let mut position = Position { next_step: 0, samples_seen: 0 };
    let (mut low_rank, mut vocabulary, mut positions) = (None, None, None);
    if let Some(dir) = &config.resume {
        let loaded = checkpoint::load(dir, model, optimizer, rank, world)?;
        low_rank = loaded.low_rank;
        position = loaded.position;
        if position.samples_seen.checked_add(about.global_batch).is_none() {
            return Err(Error::Checkpoint(format!(
                "{}: the data position, {} samples, leaves no room for a step of {} more: the file is damaged",
                loaded.state_file.display(),
                position.samples_seen,
                about.global_batch
            )));
        }
        vocabulary = loaded.run.as_ref().and_then(|r| r.vocabulary.clone());
        positions = loaded.run.as_ref().and_then(|r| r.positions);
        if let (Some(saved), Some(now)) = (vocabulary.as_deref(), about.vocabulary.as_deref()) {
            if let Some(why) = crate::text::vocabulary_mismatch(saved, now) {
                return Err(Error::Checkpoint(format!("{}: {why}", loaded.state_file.display())));
            }
        }
        // A checkpoint at the total already is refused once the ranks agree (`steps_left`).
        if rank == 0 && position.next_step < config.steps {
            crate::process::console::err_line(&format!(
                "resumed from {} at step {}",
                dir.display(),
                position.next_step
            ));
            // Checkpoints of sharded models written before `plan_fingerprint` recorded `fingerprint`.
            let recorded_before = format!("{:016x}", M::SCHEDULE.fingerprint());
            for change in loaded.run.map(|saved| changes(&saved, about, &recorded_before)).unwrap_or_default() {
                crate::process::console::err_line(&format!("warning: resuming with {change}"));
            }
        }
    }
    Ok(Resumed { position, low_rank, vocabulary, positions })
}

/// Fails unless a step is left to run from `position` (checked once the ranks agree on it).
pub(super) fn steps_left(config: &TrainConfig, position: Position) -> Result<()> {
    if position.next_step >= config.steps {
        let parameters = config.resume.as_deref().and_then(checkpoint::latest_model_file);
        return Err(Error::NothingToDo { step: position.next_step, total: config.steps, parameters });
    }
    Ok(())
}

/// What differs between the run a checkpoint recorded and this one (`also_this_schedule`: the
/// fingerprint a checkpoint of this schedule may hold instead of `now`'s).
fn changes(saved: &checkpoint::RunAbout, now: &checkpoint::RunAbout, also_this_schedule: &str) -> Vec<String> {
    let mut changes = Vec::new();
    // The samples' hash where both runs have one; their descriptions (which name paths) otherwise.
    match (&saved.data_fingerprint, &now.data_fingerprint) {
        (Some(before), Some(after)) if before != after && saved.data == now.data => changes.push(format!(
            "other data: {} holds other samples than the checkpoint's run read (content hash {after}, was {before})",
            now.data
        )),
        (Some(before), Some(after)) if before != after => changes.push(format!(
            "other data: the checkpoint's run read {}, this one reads {} (content hash {after}, was {before})",
            saved.data, now.data
        )),
        (Some(_), Some(_)) => {}
        // A loop of one's own may record no data (`RunAbout::default()`): nothing to compare.
        _ if !saved.data.is_empty() && saved.data != now.data => {
            changes.push(format!("other data: the checkpoint's run read {}, this one reads {}", saved.data, now.data))
        }
        _ => {}
    }
    if !saved.gradients.is_empty() && saved.gradients != now.gradients {
        changes
            .push(format!("gradients that travel otherwise: as {} before, as {} now", saved.gradients, now.gradients));
    }
    if !saved.schedule.is_empty() && saved.schedule != now.schedule && saved.schedule != also_this_schedule {
        changes.push(format!(
            "another compiled schedule (buckets, wire formats or PowerSGD rank): fingerprint {} before, {} now",
            saved.schedule, now.schedule
        ));
    }
    // By name: a build that records more settings, or in another order, compares what both have.
    let settings = |summary: &str| -> Vec<(String, String)> {
        summary.split("; ").filter_map(|item| item.split_once(": ")).map(|(k, v)| (k.into(), v.into())).collect()
    };
    let before = settings(&saved.optimizer);
    let changed: Vec<String> = settings(&now.optimizer)
        .into_iter()
        .filter_map(|(name, now)| {
            let (_, was) = before.iter().find(|(saved_name, _)| *saved_name == name)?;
            (*was != now).then(|| format!("{name}: {now} (was {was})"))
        })
        .collect();
    if !saved.optimizer.is_empty() && !changed.is_empty() {
        changes.push(format!("other optimizer settings: {} (its state is kept)", changed.join(", ")));
    }
    if !saved.dropout.is_empty() && saved.dropout != now.dropout {
        changes.push(format!("other dropout: {} now (was {})", now.dropout, saved.dropout));
    }
    if saved.global_batch != now.global_batch {
        changes.push(format!(
            "another global batch: {} samples per step before, {} now (the data position is kept in samples)",
            saved.global_batch, now.global_batch
        ));
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn about(data: &str, fingerprint: Option<&str>) -> checkpoint::RunAbout {
        checkpoint::RunAbout { data: data.into(), data_fingerprint: fingerprint.map(Into::into), ..Default::default() }
    }

    #[test]
    fn other_dropout_is_told_unless_the_checkpoint_records_none() {
        let with = |dropout: &str| checkpoint::RunAbout { dropout: dropout.into(), ..Default::default() };
        let told = changes(&with("rate 0.2, seed 1337"), &with("off"), "");
        assert_eq!(told, ["other dropout: off now (was rate 0.2, seed 1337)"]);
        assert!(changes(&with("rate 0.2, seed 1337"), &with("rate 0.2, seed 1337"), "").is_empty());
        assert!(changes(&with(""), &with("off"), "").is_empty(), "written before dropout was recorded");
    }

    #[test]
    fn a_checkpoint_that_records_no_data_is_not_told_from_this_run_s_data() {
        let now = about("synthetic classification set (seed 7, 784 features, 10 classes)", Some("00ff"));
        assert!(changes(&about("", None), &now, "").is_empty());
    }

    #[test]
    fn other_data_is_told_by_name_or_by_content() {
        let now = about("b.txt", None);
        assert_eq!(
            changes(&about("a.txt", None), &now, ""),
            ["other data: the checkpoint's run read a.txt, this one reads b.txt"]
        );
        let (saved, now) = (about("a.txt", Some("01")), about("a.txt", Some("02")));
        assert_eq!(
            changes(&saved, &now, ""),
            ["other data: a.txt holds other samples than the checkpoint's run read (content hash 02, was 01)"]
        );
    }
}
