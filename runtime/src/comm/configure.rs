//! How a communicator runs: the settings of a `CommConfig` (mode, emulated link, wait timeout,
//! finiteness check, wire formats, sharding), applied at once (`apply`, what a `Trainer` does at
//! the start of `fit`) or one by one, and read back.

use std::time::Duration;

use overlap_plan::{Link, Schedule};

use super::in_flight::WaitChecks;
use super::wire::Chosen;
use super::{Backend, CommConfig, CommMode, Communicator, GradBucket, Transport, WireFormat};
use crate::error::{Error, Result};

impl Communicator {
    /// Makes every wait point and blocking collective fail after `timeout`, naming the ranks it
    /// waited for (`None`: block as long as the job lives). `DEFAULT_COMM_TIMEOUT` until set.
    pub fn set_wait_timeout(&mut self, timeout: Option<Duration>) {
        self.apply_wait_timeout(timeout);
    }

    fn apply_wait_timeout(&self, timeout: Option<Duration>) {
        self.checks.set(WaitChecks { timeout, ..self.checks.get() });
        if let Backend::Mpi(t) = &self.backend {
            t.set_timeout(timeout);
        }
    }

    /// The bound `set_wait_timeout` set.
    pub fn wait_timeout(&self) -> Option<Duration> {
        self.checks.get().timeout
    }

    /// Makes every wait point fail on a NaN or infinity in the reduced gradients.
    pub fn set_check_finite(&mut self, check: bool) {
        self.checks.set(WaitChecks { finite: check, ..self.checks.get() });
    }

    /// Whether every wait point checks that the reduced gradients are finite.
    pub fn checks_finite(&self) -> bool {
        self.checks.get().finite
    }

    /// The communication settings as `config` gives them, all at once: what a `Trainer` run does
    /// at its start (`TrainConfig::comm`), and a loop of one's own may do too. The transport was
    /// chosen when the communicator started; a config naming another is refused.
    pub fn apply(&self, config: &CommConfig) -> Result<()> {
        // One rank sums nothing, so any transport serves it.
        if let (Some(running), wanted, false) = (self.transport(), config.transport, self.world_size() == 1) {
            if wanted != Transport::Auto && wanted != running {
                return Err(Error::Config(format!(
                    "`CommConfig::transport` {} asks for another transport than this communicator started with \
                     ({}): the transport is chosen when it starts (`Communicator::start_with`)",
                    wanted.name(),
                    running.name()
                )));
            }
        }
        self.mode.set(config.mode);
        self.apply_link(config.link)?;
        self.apply_wait_timeout(config.wait_timeout);
        self.checks.set(WaitChecks { finite: config.check_finite, ..self.checks.get() });
        // `CommConfig` cannot hold a per-bucket choice: `None` keeps one made with
        // `set_bucket_wire_formats` (so that `config()` then `apply` changes nothing).
        let mut wire = self.wire.borrow_mut();
        match config.grad_comm {
            Some(format) => wire.chosen = Some(Chosen::All(format)),
            None if matches!(wire.chosen, Some(Chosen::All(_))) => wire.chosen = None,
            None => {}
        }
        self.shard_chosen.set(config.shard_optimizer);
        Ok(())
    }

    /// The settings this communicator runs with now, as a `CommConfig` (what `apply` would set;
    /// a per-bucket choice of formats reads as none, which `apply` leaves in place).
    pub fn config(&self) -> CommConfig {
        let grad_comm = match &self.wire.borrow().chosen {
            Some(Chosen::All(format)) => Some(*format),
            _ => None,
        };
        CommConfig {
            transport: self.transport().unwrap_or(Transport::Auto),
            mode: self.mode.get(),
            link: self.link.get(),
            check_finite: self.checks.get().finite,
            grad_comm,
            wait_timeout: self.checks.get().timeout,
            shard_optimizer: self.shard_chosen.get(),
        }
    }

    /// Whether each rank keeps optimizer state for its own slice of every bucket of a model
    /// planned as `schedule`: the run's choice (`CommConfig::shard_optimizer`), else the model's
    /// (`#[distributed_model(shard_optimizer)]`). Models sharing a communicator each keep their
    /// own default.
    pub fn shards_optimizer(&self, schedule: &Schedule) -> bool {
        self.shard_chosen.get().unwrap_or(schedule.shard_optimizer)
    }

    /// [`Communicator::shards_optimizer`] for the model `bucket` was made for (its schedule's
    /// default travels with it, as its wire format does).
    pub(crate) fn shards(&self, bucket: &GradBucket) -> bool {
        self.shard_chosen.get().unwrap_or(bucket.sharded_by_schedule())
    }

    /// Sends every bucket's gradients in `format` (see `WireFormat`), whatever the schedule's
    /// `grad_comm` says (`--grad-comm`), and replaces an earlier choice. Every rank must choose
    /// the same (the schedule handshake and the `Trainer` check it; after the model is built,
    /// [`Communicator::agree_on_wire_formats`]). The GPU's NCCL sums stay FP32 for now (narrow
    /// formats are refused there).
    pub fn set_wire_format(&mut self, format: WireFormat) {
        self.wire.get_mut().chosen = Some(Chosen::All(format));
    }

    /// Sends bucket `k`'s gradients (launch order) in `formats[k]`, and the buckets past the
    /// slice in FP32, instead of the schedule's formats; replaces an earlier choice (of
    /// `set_wire_format` too). Every rank must choose the same (checked as `set_wire_format`'s).
    pub fn set_bucket_wire_formats(&mut self, formats: &[WireFormat]) {
        self.wire.get_mut().chosen = Some(Chosen::ByBucket(formats.to_vec()));
    }

    /// Whether the run chose the formats (`set_wire_format`, `set_bucket_wire_formats`): then
    /// buckets the schedule compresses with PowerSGD are sent whole, in the chosen format.
    pub fn wire_format_chosen(&self) -> bool {
        self.wire.borrow().chosen.is_some()
    }

    /// Undoes `set_wire_format` and `set_bucket_wire_formats`: each bucket travels as the
    /// schedule says again (low-rank buckets compressed).
    pub fn use_schedule_wire_formats(&mut self) {
        self.wire.get_mut().chosen = None;
    }

    /// The format bucket `bucket` of a model planned as `schedule` sends its gradients in: the
    /// run's choice, else the schedule's. With one rank nothing travels, and nothing is rounded
    /// whatever this says.
    pub fn wire_format(&self, schedule: &Schedule, bucket: usize) -> WireFormat {
        let planned = schedule.buckets.get(bucket).map_or(WireFormat::Fp32, |b| b.wire);
        self.wire.borrow().of(bucket, planned)
    }

    /// This communicator, its later all-reduces started as `mode` says.
    pub fn with_mode(self, mode: CommMode) -> Self {
        self.mode.set(mode);
        self
    }

    /// When its all-reduces start (`with_mode`, or the run's `CommConfig`).
    pub fn mode(&self) -> CommMode {
        self.mode.get()
    }

    /// Makes every later all-reduce take at least as long as it would on `link` (ring cost
    /// model; the real transfer still happens). With one rank there is nothing to emulate.
    pub fn emulate_link(&mut self, link: Option<Link>) -> Result<()> {
        self.apply_link(link)
    }

    fn apply_link(&self, link: Option<Link>) -> Result<()> {
        if let Backend::Mpi(t) = &self.backend {
            t.emulate_link(link)?;
        }
        self.link.set(link);
        Ok(())
    }

    /// The interconnect being emulated, if any.
    pub fn emulated_link(&self) -> Option<Link> {
        self.link.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a `Trainer` does with the communicator's settings (`config()`, then `apply`) keeps a
    /// per-bucket choice of formats, which a `CommConfig` cannot hold; a uniform one is replaced.
    #[test]
    fn applying_the_communicators_own_config_keeps_its_per_bucket_formats() {
        let mut comm = Communicator::single();
        comm.set_bucket_wire_formats(&[WireFormat::Bf16, WireFormat::Fp16]);
        comm.apply(&comm.config()).unwrap();
        let no_buckets = Schedule {
            model: "NoBuckets".into(),
            limits: overlap_plan::BucketLimits::Unlimited,
            layers: Default::default(),
            buckets: Default::default(),
            shard_optimizer: false,
            gathers: Default::default(),
        };
        let plain = &no_buckets;
        assert_eq!(
            (comm.wire_format(plain, 0), comm.wire_format(plain, 1), comm.wire_format(plain, 2)),
            (WireFormat::Bf16, WireFormat::Fp16, WireFormat::Fp32)
        );
        comm.apply(&CommConfig { grad_comm: Some(WireFormat::Fp16), ..comm.config() }).unwrap();
        assert_eq!((comm.wire_format(plain, 0), comm.wire_format(plain, 2)), (WireFormat::Fp16, WireFormat::Fp16));
        comm.apply(&CommConfig { grad_comm: None, ..comm.config() }).unwrap();
        assert!(!comm.wire_format_chosen(), "a uniform choice is undone by none");
    }
}
