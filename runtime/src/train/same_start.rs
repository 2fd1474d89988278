//! Every rank starts where rank 0 does. Each rank reads its own copy of the checkpoint it
//! resumes, of a parameters file, and of the data (paths may differ from node to node), so two
//! copies that differ would have the ranks train apart without a word, or, resumed at other
//! steps, fail in a collective with MPI's own error. Before step 1 the ranks compare one hash
//! each of what they start from: the step, parameters and optimizer state, and the samples.

use crate::checkpoint::Position;
use crate::comm::Communicator;
use crate::content_hash::ContentHash;
use crate::data::Dataset;
use crate::error::{rank_list, Error, Result};
use crate::model::DistributedModel;
use crate::optim::OptimizerState;

/// Fails on every rank, naming the ranks that differ from rank 0 and what differs, unless every
/// rank starts from the same step, parameters, optimizer state and data (collective).
pub(super) fn check<M: DistributedModel>(
    comm: &Communicator,
    model: &M,
    optimizer: &impl OptimizerState,
    position: Position,
    resumed: bool,
    (data_fingerprint, data_description): (Option<u64>, String),
    held_out: Option<&dyn Dataset>,
) -> Result<()> {
    if comm.world_size() == 1 {
        return Ok(());
    }
    let steps = comm.all_gather_u64(position.next_step)?;
    let states = comm.all_gather_u64(state_hash(model, optimizer, position))?;
    let samples = comm.all_gather_u64(data_fingerprint.unwrap_or(0))?;
    let held_out_samples = comm.all_gather_u64(held_out.and_then(|s| s.fingerprint()).unwrap_or(0))?;
    let others = |of: &[u64]| rank_list(&(1..of.len()).filter(|&r| of[r] != of[0]).collect::<Vec<usize>>());
    let start = if !others(&steps).is_empty() {
        let at: Vec<String> = steps.iter().enumerate().map(|(r, s)| format!("rank {r} at step {s}")).collect();
        Some(format!("ranks resume at other steps ({})", at.join(", ")))
    } else if !others(&states).is_empty() {
        Some(format!("rank(s) {} start from other parameters or optimizer state than rank 0", others(&states)))
    } else {
        None
    };
    let mut problems: Vec<String> = start.map(|p| format!("{p}: {}", starting_point(resumed))).into_iter().collect();
    // The fingerprints cover a sample's every token, the vocabulary and the windows; the
    // description may read the same on ranks whose copies differ.
    if !others(&samples).is_empty() {
        problems.push(format!(
            "rank(s) {} read other training data than rank 0 (this rank's: {}): each rank reads its own copy \
             of the data, and every copy must hold the same samples (the same tokens and vocabulary)",
            others(&samples),
            data_description
        ));
    }
    if !others(&held_out_samples).is_empty() {
        problems.push(format!(
            "rank(s) {} read other held-out data than rank 0: each rank reads its own copy of the validation \
             split, and every copy must hold the same samples",
            others(&held_out_samples),
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Config(problems.join("; ")))
    }
}

fn starting_point(resumed: bool) -> &'static str {
    if resumed {
        "each rank reads the checkpoint of `TrainConfig::resume` itself, and every rank's copy must be \
         the same checkpoint"
    } else {
        "the model every rank passes to `fit` must hold the same values (the same seed, or the same \
         parameters file on every rank)"
    }
}

fn state_hash<M: DistributedModel>(model: &M, optimizer: &impl OptimizerState, position: Position) -> u64 {
    let mut hash = ContentHash::new();
    hash.u64(position.next_step);
    hash.u64(position.samples_seen);
    hash.u64(optimizer.step_count().unwrap_or(u64::MAX));
    for (i, p) in M::SCHEDULE.params().enumerate() {
        hash.f32s(model.param(p));
        for buffer in optimizer.buffers(i).unwrap_or_default() {
            hash.f32s(buffer);
        }
    }
    hash.finish()
}
