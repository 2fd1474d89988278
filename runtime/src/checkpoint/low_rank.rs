//! PowerSGD's state in a checkpoint (`powersgd.safetensors`): every rank's error feedback, which
//! differ, gathered to rank 0 (`error.rank1.b0`: rank 1's errors of bucket 0, its factorised
//! matrices' in buffer order), and the warm-start Q of each bucket (`q.b0`, the same on every
//! rank, stored as Qᵀ); `state.json` records the ranks and the steps counted. A resumed run
//! continues with each rank's own errors and the same Q, as if it had not stopped; it must run
//! on as many ranks.

use std::collections::BTreeMap;

use overlap_plan::Schedule;
use serde::{Deserialize, Serialize};

use crate::comm::{Communicator, GradBucket};
use crate::error::{Error, Result};
use crate::tensor_file::Tensor;

pub(super) const FILE: &str = "powersgd.safetensors";

/// What `state.json` says about the PowerSGD state file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Meta {
    /// Ranks whose errors the file holds.
    pub ranks: usize,
    /// Synchronised steps each low-rank bucket had counted (compression starts after
    /// `start_iter` of them).
    pub steps: u64,
}

/// PowerSGD's state of every rank, gathered at rank 0 for its checkpoint.
pub struct Gathered {
    pub(super) meta: Meta,
    pub(super) tensors: Vec<Tensor<'static>>,
}

/// This rank's PowerSGD state read back from a checkpoint, to put into its buckets.
#[derive(Clone, Debug)]
pub struct Restored {
    /// The file it was read from, for the error of a state that does not fit.
    file: std::path::PathBuf,
    steps: u64,
    /// Per low-rank bucket index: this rank's errors and the warm-start Q.
    buckets: BTreeMap<usize, (Vec<f32>, Vec<f32>)>,
}

/// Collective (every rank calls it when a checkpoint is written): each rank's errors gathered to
/// rank 0, with Q and the steps. `None` on the other ranks, and everywhere when no bucket is
/// low-rank.
pub fn gather(buckets: &[&GradBucket], comm: &Communicator) -> Result<Option<Gathered>> {
    let states: Vec<_> = buckets.iter().filter_map(|b| Some((b.index(), b.as_slice(), b.low_rank_state()?))).collect();
    if states.is_empty() {
        return Ok(None);
    }
    let mut mine = Vec::new();
    for (_, data, state) in &states {
        state.error_ranges().for_each(|r| mine.extend_from_slice(&data[r]));
    }
    let Some(all) = comm.gather_f32_to_root(&mine)? else { return Ok(None) };
    let mut tensors = Vec::new();
    for (rank, errors) in all.iter().enumerate() {
        let mut at = 0;
        for (k, _, state) in &states {
            let len: usize = state.error_ranges().map(|r| r.len()).sum();
            tensors.push(Tensor::new(format!("error.rank{rank}.b{k}"), vec![len], errors[at..at + len].to_vec()));
            at += len;
        }
    }
    for (k, _, state) in &states {
        let (q, _) = state.warm_start();
        tensors.push(Tensor::new(format!("q.b{k}"), vec![q.len()], q.to_vec()));
    }
    // Every low-rank bucket is launched at every step: they have all counted the same.
    let steps = states[0].2.warm_start().1;
    Ok(Some(Gathered { meta: Meta { ranks: all.len(), steps }, tensors }))
}

/// The tensors `powersgd.safetensors` must hold for `schedule` on `ranks` ranks, by name.
pub(super) fn expected(schedule: &Schedule, ranks: usize) -> BTreeMap<String, Vec<usize>> {
    let mut out = BTreeMap::new();
    for (k, b) in schedule.buckets.iter().enumerate() {
        let Some(low_rank) = b.low_rank else { continue };
        let (mut errors, mut q) = (0, 0);
        for &r in b.params.iter() {
            if let Some((rows, cols)) = low_rank.matrix(&schedule.param(r).shape) {
                (errors, q) = (errors + rows * cols, q + cols * low_rank.rank);
            }
        }
        for rank in 0..ranks {
            out.insert(format!("error.rank{rank}.b{k}"), vec![errors]);
        }
        out.insert(format!("q.b{k}"), vec![q]);
    }
    out
}

/// Rank `rank`'s part of the checked tensors `values` (as `expected` names them).
pub(super) fn restored(
    file: std::path::PathBuf,
    meta: Meta,
    mut values: BTreeMap<String, Vec<f32>>,
    rank: usize,
) -> Restored {
    let mut buckets = BTreeMap::new();
    let names: Vec<String> = values.keys().filter(|n| n.starts_with("q.b")).cloned().collect();
    for q_name in names {
        let k: usize = q_name["q.b".len()..].parse().expect("named by `expected`");
        let q = values.remove(&q_name).expect("listed");
        let errors = values.remove(&format!("error.rank{rank}.b{k}")).unwrap_or_default();
        buckets.insert(k, (errors, q));
    }
    Restored { file, steps: meta.steps, buckets }
}

impl Restored {
    /// Puts this rank's errors and the warm-start Q into `buckets` (launch order).
    pub fn restore(&self, buckets: Vec<&mut GradBucket>) -> Result<()> {
        for bucket in buckets {
            let index = bucket.index();
            let Some((errors, q)) = self.buckets.get(&index) else { continue };
            let ranges: Vec<_> = match bucket.low_rank_state() {
                Some(state) => state.error_ranges().collect(),
                None => continue,
            };
            let mut at = 0;
            for r in ranges {
                let len = r.len();
                bucket.as_mut_slice()[r].copy_from_slice(&errors[at..at + len]);
                at += len;
            }
            let state = bucket.low_rank_state_mut().expect("checked above");
            if at != errors.len() || !state.restore_warm_start(q, self.steps) {
                return Err(Error::Checkpoint(format!(
                    "{}: bucket {index}'s PowerSGD state does not fit this model's bucket",
                    self.file.display()
                )));
            }
        }
        Ok(())
    }
}
