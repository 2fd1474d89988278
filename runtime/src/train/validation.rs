//! The loss on held-out data every so many steps (`TrainConfig::validation`), as nanoGPT's
//! `estimate_loss`: forward and the loss only, on the same samples each time, sharded over the
//! ranks as training batches are, averaged over every rank's batches. Its forward calls are kept
//! out of the trace, which times training steps.

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
    let Some(v) = config.validation else { return Ok(()) };
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
    Ok(())
}

/// The global mean loss over `batches` held-out batches of every rank (every rank calls it).
pub(super) fn loss<M: DistributedModel>(
    backend: &mut impl StepBackend<M>,
    held_out: &mut dyn Dataset,
    loss: &dyn Loss,
    config: &TrainConfig,
    comm: &Communicator,
    batch: &mut Batch,
) -> Result<f64> {
    let batches = config.validation.map_or(0, |v| v.batches);
    let (rank, world) = (comm.rank(), comm.world_size());
    let positions = held_out.positions().max(1);
    let global_batch = (config.batch * world) as u64;
    let mut sum = 0.0f64;
    trace::paused(|| -> Result<()> {
        for k in 0..batches as u64 {
            let first = shard_start_after(k * global_batch, 0, world, rank, config.batch);
            held_out.fill(first, config.batch, batch)?;
            batch.context = StepContext::sequences(config.batch, positions);
            if batch.rows() != batch.context.row_count() {
                return Err(Error::Dataset(format!(
                    "asked the held-out data for {} samples of {positions} position(s) from index {first}, it filled {} \
                     rows",
                    config.batch,
                    batch.rows()
                )));
            }
            sum += backend.held_out_loss(batch, loss)?;
        }
        Ok(())
    })?;
    Ok(comm.sum_f64(sum)? / (batches * world) as f64)
}
