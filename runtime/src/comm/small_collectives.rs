//! The job's small collectives, outside the gradients' path: rank 0's values to every rank
//! (the initial parameters, NCCL's unique id), metrics summed over ranks (the loss), gathers to
//! rank 0 (checkpoint shards, trace spans), barriers, and the start-up agreements that must fail
//! on every rank rather than hang (the schedule's fingerprint, wire formats, sharding).

use overlap_plan::Schedule;

use super::mpi_thread::MpiThread;
use super::{Backend, Communicator, PendingSum, CHECKPOINT_WRITE_TIMEOUT};
use crate::error::{rank_list, Error, Result};

impl Communicator {
    /// Replaces `data` on every rank with rank 0's values.
    pub fn broadcast_from_root(&self, data: &mut [f32]) -> Result<()> {
        self.replace_with_root(data, MpiThread::broadcast)
    }

    /// Replaces `data` on every rank with rank 0's bytes (e.g. NCCL's unique id).
    pub fn broadcast_bytes_from_root(&self, data: &mut [u8]) -> Result<()> {
        self.replace_with_root(data, MpiThread::broadcast_bytes)
    }

    /// Copies into `data` what `broadcast` (a request typed by element) returns for it: rank 0's
    /// values. A single process is its own root.
    fn replace_with_root<T: Copy>(
        &self,
        data: &mut [T],
        broadcast: fn(&MpiThread, Vec<T>) -> Result<Vec<T>>,
    ) -> Result<()> {
        if let Backend::Mpi(t) = &self.backend {
            data.copy_from_slice(&broadcast(t, data.to_vec())?);
        }
        Ok(())
    }

    /// Sum of `value` over all ranks (blocking; for metrics such as the loss, not gradients).
    pub fn sum_f64(&self, value: f64) -> Result<f64> {
        match &self.backend {
            Backend::Single => Ok(value),
            Backend::Mpi(t) => t.sum_f64(value),
        }
    }

    /// Starts summing `value` over all ranks without waiting (a metric such as the loss, queued
    /// before the step's launches so that nothing queued later delays it); `finish_sum` gives
    /// the sum.
    pub fn start_sum_f64(&self, value: f64) -> Result<PendingSum> {
        Ok(PendingSum(match &self.backend {
            Backend::Single => Ok(value),
            Backend::Mpi(t) => Err(t.start_sum_f64(value)?),
        }))
    }

    /// The sum `start_sum_f64` started.
    pub fn finish_sum(&self, pending: PendingSum) -> Result<f64> {
        match (pending.0, &self.backend) {
            (Ok(value), _) => Ok(value),
            (Err(answer), Backend::Mpi(t)) => t.finish_sum(answer),
            (Err(_), Backend::Single) => unreachable!("a single process answers at once"),
        }
    }

    /// `value` from every rank, indexed by rank.
    pub fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        match &self.backend {
            Backend::Single => Ok(vec![value]),
            Backend::Mpi(t) => t.all_gather_u64(value),
        }
    }

    /// Every rank's `data`, of any length, at rank 0, bit for bit, indexed by rank; `None` on
    /// the other ranks (through the u64 gather: the length, then two values to a word).
    pub fn gather_f32_to_root(&self, data: &[f32]) -> Result<Option<Vec<Vec<f32>>>> {
        let words = std::iter::once(data.len() as u64)
            .chain(
                data.chunks(2)
                    .map(|pair| u64::from(pair[0].to_bits()) | u64::from(pair.get(1).map_or(0, |v| v.to_bits())) << 32),
            )
            .collect();
        let gathered = self.gather_u64_to_root(words)?;
        Ok(gathered.map(|ranks| {
            ranks
                .into_iter()
                .map(|words| {
                    let len = words.first().map_or(0, |&n| n as usize);
                    let mut values: Vec<f32> = words[1..]
                        .iter()
                        .flat_map(|w| [f32::from_bits(*w as u32), f32::from_bits((w >> 32) as u32)])
                        .collect();
                    values.truncate(len);
                    values
                })
                .collect()
        }))
    }

    /// Every rank's `data` at rank 0, indexed by rank; `None` on the other ranks.
    pub fn gather_u64_to_root(&self, data: Vec<u64>) -> Result<Option<Vec<Vec<u64>>>> {
        match &self.backend {
            Backend::Single => Ok(Some(vec![data])),
            Backend::Mpi(t) => t.gather_u64(data),
        }
    }

    /// Blocks until every rank has reached it; fails after the wait timeout, when one is set
    /// (`set_wait_timeout`), naming the ranks behind.
    pub fn barrier(&self) -> Result<()> {
        match &self.backend {
            Backend::Single => Ok(()),
            Backend::Mpi(t) => t.barrier(),
        }
    }

    /// Waits for rank 0 to finish writing a checkpoint: a barrier bounded by the communication
    /// timeout or `CHECKPOINT_WRITE_TIMEOUT`, whichever is longer, so a slow disk is not taken
    /// for a stuck rank; but a rank 0 seen stopped or gone (on this node) for the communication
    /// timeout is not writing, and is named then.
    pub fn wait_for_checkpoint_write(&self) -> Result<()> {
        match &self.backend {
            Backend::Single => Ok(()),
            Backend::Mpi(t) => t.wait_for_writer(
                0,
                self.checks.get().timeout.map(|t| t.max(CHECKPOINT_WRITE_TIMEOUT)),
                self.checks.get().timeout,
                "waiting for rank 0 to write a checkpoint",
            ),
        }
    }

    /// Fails on every rank, naming the ranks that differ from rank 0, unless all ranks compiled
    /// the same schedule. Runs before any gradient is exchanged, so a mismatch cannot hang.
    pub fn check_same_schedule(&self, schedule: &Schedule) -> Result<()> {
        crate::fault::at_start_up("handshake");
        let fingerprints = self.all_gather_u64(schedule.fingerprint())?;
        let differing: Vec<usize> = (0..fingerprints.len()).filter(|&r| fingerprints[r] != fingerprints[0]).collect();
        if !differing.is_empty() {
            return Err(Error::ScheduleMismatch { model: schedule.model.to_string(), differing, fingerprints });
        }
        self.agree_on_wire_formats()?;
        self.agree_on_sharding(schedule)
    }

    /// Fails on every rank unless all of them send the gradients in the same formats (the
    /// schedule's, unless the run chose others): a rank sending bf16 where another reads FP32
    /// would sum garbage, or leave one collective waiting for another. The schedule handshake and
    /// the `Trainer` (after `TrainConfig::comm`) ask; a loop of one's own that changes the
    /// formats after the model was built asks itself. Collective.
    pub fn agree_on_wire_formats(&self) -> Result<()> {
        let formats = self.all_gather_u64(self.wire.borrow().override_code())?;
        let others: Vec<usize> = (1..formats.len()).filter(|&r| formats[r] != formats[0]).collect();
        if !others.is_empty() {
            return Err(Error::Config(format!(
                "ranks disagree on the gradients' wire formats: rank(s) {} chose others than rank 0 \
                 (`CommConfig::grad_comm`, `Communicator::set_wire_format`)",
                rank_list(&others)
            )));
        }
        Ok(())
    }

    /// Fails on every rank unless all of them shard the optimizer state (or none does), with
    /// `schedule`'s choice where the run made none: a rank reduce-scattering a bucket another
    /// all-reduces would hang. Collective.
    pub fn agree_on_sharding(&self, schedule: &Schedule) -> Result<()> {
        let sharding = self.all_gather_u64(u64::from(self.shards_optimizer(schedule)))?;
        let others: Vec<usize> = (1..sharding.len()).filter(|&r| sharding[r] != sharding[0]).collect();
        if !others.is_empty() {
            let says = |s: u64| if s == 1 { "shards" } else { "does not shard" };
            return Err(Error::Config(format!(
                "ranks disagree on sharding the optimizer state: rank 0 {} it, rank(s) {} {} \
                 (`CommConfig::shard_optimizer`)",
                says(sharding[0]),
                rank_list(&others),
                says(sharding[others[0]])
            )));
        }
        Ok(())
    }
}
