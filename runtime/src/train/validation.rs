//! The loss on held-out data every so many steps (`TrainConfig::validation`), as nanoGPT's
//! `estimate_loss`: forward and the loss only, on the same samples each time, sharded over the
//! ranks as training batches are, averaged over every rank's batches. Its forward calls are kept
//! out of the trace, which times training steps. A stop signal ends a pass at the next batch, so
//! that the run stops after the step as it would without validation.

use super::stop::StopSignals;
use crate::backend::StepBackend;
use crate::comm::Communicator;
use crate::config::TrainConfig;
use crate::data::{shard_start_after, Batch, Dataset};
use crate::error::{Error, Result};
use crate::layer::StepContext;
use crate::loss::Loss;
use crate::model::DistributedModel;
use crate::trace;

/// The settings and the held-out data agree with each other and with the training data.
pub(super) fn check(config: &TrainConfig, train: &dyn Dataset, held_out: Option<&dyn Dataset>) -> Result<()> {
    let Some(v) = config.validation else {
        return match held_out {
            Some(_) => Err(Error::Config(
                "held-out data was given (`Trainer::validate`), but `TrainConfig::validation` is none: a \
                 `Trainer::config` after `validate` replaced it"
                    .into(),
            )),
            None => Ok(()),
        };
    };
    let Some(held_out) = held_out else {
        return Err(Error::Config(
            "`TrainConfig::validation` is set, but no held-out data was given (`Trainer::validate`)".into(),
        ));
    };
    if v.every == 0 || v.batches == 0 {
        return Err(Error::Config(format!(
            "`TrainConfig::validation` every {} steps on {} batches: both must be at least 1",
            v.every, v.batches
        )));
    }
    if held_out.len() == Some(0) {
        return Err(Error::Dataset(format!("the held-out data ({}) holds no samples", held_out.describe())));
    }
    let shape = |d: &dyn Dataset| (d.features(), d.positions().max(1));
    if shape(held_out) != shape(train) {
        return Err(Error::Dataset(format!(
            "the held-out data ({}) has {} feature(s) and {} position(s) per sample, the training data ({}) {} and {}",
            held_out.describe(),
            shape(held_out).0,
            shape(held_out).1,
            train.describe(),
            shape(train).0,
            shape(train).1
        )));
    }
    if let (Some(theirs), Some(ours)) = (held_out.vocabulary(), train.vocabulary()) {
        if theirs != ours {
            let (a, b): (Vec<char>, Vec<char>) = (theirs.chars().collect(), ours.chars().collect());
            let first = crate::text::first_difference(&a, &b);
            let at = |v: &[char]| v.get(first).map_or("none".to_string(), |c| format!("{c:?}"));
            return Err(Error::Dataset(format!(
                "the held-out data ({}) has another vocabulary than the training data ({}): token {first} is {} in \
                 the one and {} in the other ({} and {} characters), so the same ids would mean other characters",
                held_out.describe(),
                train.describe(),
                at(&a),
                at(&b),
                a.len(),
                b.len()
            )));
        }
    }
    Ok(())
}

/// What one validation pass found.
#[derive(Debug, PartialEq)]
pub(super) enum HeldOutLoss {
    /// The global mean loss over every rank's batches.
    Measured(f64),
    /// A signal (SIGTERM, SIGINT) stopped some rank's pass after `done` of the `of` batches of
    /// all ranks, so that the run can stop after this step as the signal asks, instead of
    /// measuring on past a scheduler's grace period. A part of the batches is no measurement.
    CutShort { done: u64, of: u64 },
}

/// The global mean loss over `batches` held-out batches of every rank (every rank calls it);
/// every rank stops early, at the same batch, once one of them got a stop signal.
pub(super) fn loss<M: DistributedModel>(
    backend: &mut impl StepBackend<M>,
    held_out: &mut dyn Dataset,
    loss: &dyn Loss,
    (config, stop): (&TrainConfig, Option<&StopSignals>),
    comm: &Communicator,
    batch: &mut Batch,
) -> Result<HeldOutLoss> {
    let batches = config.validation.map_or(0, |v| v.batches) as u64;
    let (rank, world) = (comm.rank(), comm.world_size());
    let positions = held_out.positions().max(1);
    let global_batch = (config.batch * world) as u64;
    let (mut sum, mut done) = (0.0f64, 0u64);
    trace::paused(|| -> Result<()> {
        // Every rank votes before each batch whether it got a signal, and reads the vote before
        // the next: all stop at the same batch, one batch after any rank's signal, so that a
        // signal to one rank ends the others' passes too (they would measure on past the grace
        // period a scheduler gives the job).
        let mut vote = None;
        for k in 0..batches {
            if let Some(stop) = stop {
                if let Some(previous) = vote.take() {
                    if comm.finish_sum(previous)? > 0.0 {
                        break;
                    }
                }
                vote = Some(stop.start_vote(comm)?);
            }
            let first = shard_start_after(k * global_batch, 0, world, rank, config.batch);
            held_out.fill(first, config.batch, batch)?;
            batch.context = StepContext::sequences(config.batch, positions);
            batch.check_filled("the held-out data", config.batch, first, held_out.features())?;
            sum += backend.held_out_loss(batch, loss)?;
            done += 1;
        }
        // Each rank started as many sums as the others: the last one is read by all.
        if let Some(last) = vote {
            comm.finish_sum(last)?;
        }
        Ok(())
    })?;
    // Both sums on every rank, whether it stopped early or not.
    let (sum, done, of) = (comm.sum_f64(sum)?, comm.sum_f64(done as f64)? as u64, batches * world as u64);
    Ok(if done == of { HeldOutLoss::Measured(sum / of as f64) } else { HeldOutLoss::CutShort { done, of } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ValidationConfig;
    use crate::text::CharText;

    #[test]
    fn held_out_text_of_another_vocabulary_is_refused() {
        let config =
            TrainConfig { validation: Some(ValidationConfig { every: 5, batches: 1 }), ..TrainConfig::default() };
        let train = CharText::new(&"abcd".repeat(20), 4, 0, "train.txt").unwrap();
        assert!(check(&config, &train, Some(&train.held_out().unwrap())).is_ok());
        let other = CharText::new(&"abce".repeat(20), 4, 0, "other.txt").unwrap();
        let error = check(&config, &train, Some(&other)).unwrap_err().to_string();
        assert!(error.contains("has another vocabulary than the training data"), "{error}");
        assert!(error.contains("token 3 is 'e' in the one and 'd' in the other (4 and 4 characters)"), "{error}");
    }
}
