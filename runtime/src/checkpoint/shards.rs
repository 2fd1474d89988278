//! Sharded optimizer state in checkpoints: saved as an unsharded run saves it, so that a
//! checkpoint resumes with or without sharding and on any number of ranks.
//!
//! With `CommConfig::shard_optimizer` each rank keeps a parameter's state only for the part of
//! it inside the rank's shard of its bucket (`overlap_plan::owned_part`). Before a write, every
//! rank's parts go to rank 0 and are joined in rank order, which is element order
//! (`gather`); after a read, each rank keeps its own parts of the whole buffers (`keep_own`).

use overlap_plan::{owned_part, shard_of, Schedule};

use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::optim::OptimizerState;

/// The optimizer state of every parameter joined from all ranks, at rank 0, with the running
/// optimizer's kind, buffer names and step count.
pub struct Joined {
    kind: &'static str,
    names: &'static [&'static str],
    step_count: Option<u64>,
    /// Per parameter (definition order): its whole buffers, or none before its first update.
    buffers: Vec<Option<Vec<Vec<f32>>>>,
}

/// Every rank's parts of every parameter's state, joined at rank 0 (`None` on the other ranks).
/// Collective: every rank calls it, for the same schedule.
pub fn gather<O: OptimizerState>(optimizer: &O, schedule: &Schedule, comm: &Communicator) -> Result<Option<Joined>> {
    let names = optimizer.buffer_names().len();
    let mut joined: Vec<Option<Vec<Vec<f32>>>> = Vec::new();
    for (index, p) in schedule.params().enumerate() {
        let numel = schedule.param(p).numel();
        let mine = optimizer.buffers(index);
        let mut whole = Vec::with_capacity(names);
        for b in 0..names {
            let part = mine.as_ref().map_or(&[][..], |buffers| buffers[b]);
            if let Some(parts) = comm.gather_f32_to_root(part)? {
                whole.push(parts.concat());
            }
        }
        let name = || schedule.param_name(p);
        joined.push(match whole.first().map(Vec::len) {
            None | Some(0) => None,
            Some(len) if len == numel && whole.iter().all(|w| w.len() == numel) => Some(whole),
            Some(len) => {
                return Err(Error::Checkpoint(format!(
                    "the ranks' optimizer state of `{}` joins to {len} values, and the parameter has {numel}: the \
                     ranks did not shard it alike",
                    name()
                )))
            }
        });
    }
    Ok((comm.rank() == 0).then(|| Joined {
        kind: optimizer.kind(),
        names: optimizer.buffer_names(),
        step_count: optimizer.step_count(),
        buffers: joined,
    }))
}

/// Keeps of every parameter's state only this rank's part (see `owned_part`), for a run that
/// shards it; the whole buffers came from a checkpoint.
pub fn keep_own<O: OptimizerState>(optimizer: &mut O, schedule: &Schedule, comm: &Communicator) {
    for (index, p) in schedule.params().enumerate() {
        let info = schedule.param(p);
        let shard = shard_of(schedule.buckets[info.bucket].numel, comm.world_size(), comm.rank());
        let own = owned_part(info.offset, info.numel(), &shard);
        let Some(buffers) = optimizer.buffers(index) else { continue };
        let parts: Vec<Vec<f32>> = buffers.iter().map(|b| b[own.clone()].to_vec()).collect();
        optimizer.set_buffers(index, &parts.iter().map(Vec::as_slice).collect::<Vec<_>>());
    }
}

impl OptimizerState for Joined {
    fn kind(&self) -> &'static str {
        self.kind
    }
    fn buffer_names(&self) -> &'static [&'static str] {
        self.names
    }
    fn buffers(&self, index: usize) -> Option<Vec<&[f32]>> {
        let whole = self.buffers.get(index)?.as_ref()?;
        Some(whole.iter().map(Vec::as_slice).collect())
    }
    fn set_buffers(&mut self, index: usize, buffers: &[&[f32]]) {
        self.buffers[index] = Some(buffers.iter().map(|b| b.to_vec()).collect());
    }
    fn step_count(&self) -> Option<u64> {
        self.step_count
    }
    fn set_step_count(&mut self, step: u64) {
        self.step_count = Some(step);
    }
}
