//! What a run checks before its first step: settings that cannot run, a dataset that does not
//! fit the model, memory it cannot have, recording rank 0 cannot hold, parameters that sharded
//! optimizer state cannot lend. (Its output files: `outputs`; where it starts: `start_point`.)

use overlap_plan::Schedule;

use crate::comm::{CommMode, Communicator};
use crate::config::{Device, TrainConfig};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::layer::DeviceOp;
use crate::memory::RunShape;
use crate::model::DistributedModel;
use crate::optim::LrSchedule;

/// Settings that cannot run on `world` ranks, and a dataset that does not fit the model, refused
/// before anything starts.
pub(super) fn check<M: DistributedModel>(config: &TrainConfig, data: &impl Dataset, world: usize) -> Result<()> {
    let schedule = &M::SCHEDULE;
    let run =
        config.run_shape(crate::memory::activation_bytes_of::<M>(config.batch, data.positions(), config.dropout.rate));
    let zero = [
        ("`TrainConfig::steps`", config.steps == 0),
        ("`TrainConfig::batch`", config.batch == 0),
        ("`TrainConfig::accumulate`", config.accumulate == 0),
        ("`TrainConfig::threads`", config.threads == 0),
        ("`TrainConfig::log_every`", config.log_every == 0),
        ("`ObserveConfig::report_every`", config.observe.report_every == Some(0)),
    ];
    if let Some((name, _)) = zero.iter().find(|(_, is_zero)| *is_zero) {
        return Err(Error::Config(format!("{name} must be at least 1")));
    }
    if let Some(problem) = config.optimizer.lr_schedule.problem() {
        return Err(Error::Config(format!(
            "`OptimizerConfig::lr_schedule` {}: {problem}",
            config.optimizer.lr_schedule
        )));
    }
    if let (LrSchedule::WarmupCosine { min_lr, .. }, base) = (config.optimizer.lr_schedule, config.optimizer.base_lr())
    {
        if min_lr > base {
            return Err(Error::Config(format!(
                "`OptimizerConfig::lr_schedule` {}: its minimum rate {min_lr:e} is above the learning rate {base:e} \
                 (`OptimizerConfig::lr`), so the decay would raise the rate; give a minimum of at most the rate",
                config.optimizer.lr_schedule
            )));
        }
    }
    if let Some(problem) = config.optimizer.problem() {
        return Err(Error::Config(problem));
    }
    check_dropout::<M>(config)?;
    if config.save.as_ref().is_some_and(|s| s.every == Some(0)) {
        return Err(Error::Config("checkpoints every 0 steps: give a positive interval or none".into()));
    }
    if config.comm.mode == CommMode::Skip && world > 1 {
        let kept: Vec<&str> = [
            (config.save.is_some(), "`SaveConfig::dir`"),
            (config.save_params.is_some(), "`TrainConfig::save_params`"),
            // The held-out loss would average the losses of as many different models.
            (config.validation.is_some(), "a held-out loss (`TrainConfig::validation`)"),
        ]
        .into_iter()
        .filter_map(|(set, what)| set.then_some(what))
        .collect();
        if !kept.is_empty() {
            return Err(Error::Config(format!(
                "`CommConfig::mode` compute-only sums no gradients, so on {world} ranks each rank's parameters drift \
                 apart and none is the run's result: it has nothing to do with {}",
                kept.join(", ")
            )));
        }
    }
    // The data position counts samples in 64 bits: a step must not take more than that holds.
    let per_step = [config.batch, config.accumulate, world].iter().try_fold(1u64, |n, &f| n.checked_mul(f as u64));
    if per_step.is_none() {
        return Err(Error::Config(format!(
            "`TrainConfig::accumulate` {} with `TrainConfig::batch` {} on {world} rank(s) takes more samples per \
             step than a 64-bit \
             count holds",
            config.accumulate, config.batch
        )));
    }
    check_sharding(config, schedule)?;
    if config.device == Device::Cpu {
        check_memory(config, schedule, &run)?;
    } else if let Some(chosen) = schedule.grad_comm() {
        // Refused before the GPU is even opened: the same on machines without one.
        return Err(Error::GradCommOnGpu { model: schedule.model.to_string(), chosen });
    }
    check_recording(config, schedule, &run, world)?;
    check_features::<M>(data)
}

/// The data's features per sample against the model's first layer, and a finite set's samples:
/// one at least.
pub(super) fn check_features<M: DistributedModel>(data: &impl Dataset) -> Result<()> {
    if data.len() == Some(0) {
        return Err(Error::Dataset(format!("the data ({}) holds no samples", data.describe())));
    }
    let schedule = &M::SCHEDULE;
    let Some((features, _)) = schedule.io_widths() else {
        return Err(Error::Config(format!("{} has no layer with fixed widths", schedule.model)));
    };
    if data.features() != features {
        // What the data says of itself, where it says more than its width (`Dataset::describe`).
        let described = data.describe();
        let own = if described == crate::data::width_only(data.features()) {
            String::new()
        } else {
            format!(" ({described})")
        };
        return Err(Error::Dataset(format!(
            "the data{own} gives {} features per sample, {}'s first layer takes {features}",
            data.features(),
            schedule.model
        )));
    }
    Ok(())
}

/// Notes before step 1 where a finite set holds fewer samples than are read together: a global
/// batch (every step then reads some samples twice), or a held-out measurement's batches (some
/// count twice in its mean).
pub(super) fn repeated_samples(
    config: &TrainConfig,
    data: &dyn Dataset,
    held_out: Option<&dyn Dataset>,
    world: usize,
) -> Vec<String> {
    let global = (config.batch as u64).saturating_mul(world as u64);
    let per_step = global.saturating_mul(config.accumulate as u64);
    let mut notes = Vec::new();
    if let Some(len) = data.len().filter(|&len| len < per_step) {
        notes.push(format!(
            "the data ({}) holds {len} samples, fewer than the {per_step} a step reads: every step reads some twice",
            data.describe()
        ));
    }
    let batches = config.validation.map_or(0, |v| v.batches);
    notes.extend(held_out.and_then(|h| counted_twice(h, "held-out data", global.saturating_mul(batches as u64))));
    notes
}

/// A note where `data` holds fewer samples than the `measured` a measurement of its loss reads.
pub(super) fn counted_twice(data: &dyn Dataset, what: &str, measured: u64) -> Option<String> {
    let len = data.len().filter(|&len| len < measured)?;
    Some(format!(
        "the {what} ({}) holds {len} samples, fewer than the {measured} a measurement reads: some count twice in its \
         mean",
        data.describe()
    ))
}

/// A note before step 1 when an emulated link is so slow that even one bucket's all-reduce (a
/// sharded run's reduce-scatter) outlasts the wait timeout: the first wait that reaches it will
/// time out. (A note, not a refusal: a slow link is also how one sees a timeout's message.)
pub(super) fn link_outlasts_timeout(config: &TrainConfig, schedule: &Schedule, world: usize) -> Option<String> {
    let (link, timeout) = (config.comm.link?, config.comm.wait_timeout?);
    // The bytes that travel, as the emulated link holds them: half a bucket's in bf16 or fp16
    // (PowerSGD's buckets travel whole until it starts).
    let bytes = |b: &overlap_plan::BucketInfo| {
        b.numel.saturating_mul(config.comm.grad_comm.unwrap_or(b.wire).bytes_per_value())
    };
    let largest = schedule.buckets.iter().enumerate().max_by_key(|(_, b)| bytes(b));
    let (k, bucket) = largest.filter(|_| world > 1 && config.comm.mode != CommMode::Skip)?;
    let bytes = bytes(bucket);
    // Sharded state waits for a reduce-scatter, then for an all-gather: each half an all-reduce.
    let (collective, seconds) = if config.comm.shard_optimizer.unwrap_or(schedule.shard_optimizer) {
        ("reduce-scatter", link.ring_reduce_scatter_seconds(bytes, world))
    } else {
        ("all-reduce", link.ring_all_reduce_seconds(bytes, world))
    };
    (seconds >= timeout.as_secs_f64()).then(|| {
        format!(
            "on the emulated link ({link}), the {collective} of bucket b{k} ({:.2} MiB) takes {seconds:.2} s over \
             {world} ranks, at least the wait timeout ({timeout:?}): its wait will time out",
            bytes as f64 / (1 << 20) as f64
        )
    })
}

/// A dropout rate in `[0, 1)`, and only for a model that has a layer to apply it: a `Dropout`, or
/// attention (which drops its weights).
fn check_dropout<M: DistributedModel>(config: &TrainConfig) -> Result<()> {
    let rate = config.dropout.rate;
    if !(0.0..1.0).contains(&rate) {
        return Err(Error::Config(format!(
            "`DropoutConfig::rate` {rate}: a dropout rate is at least 0 and below 1 (the share of activations dropped)"
        )));
    }
    let drops = |op: &DeviceOp| matches!(op, DeviceOp::Dropout | DeviceOp::CausalSelfAttention { .. });
    if rate > 0.0 && !M::DEVICE_OPS.iter().any(drops) {
        return Err(Error::Config(format!(
            "`DropoutConfig::rate` {rate}: {} has no `Dropout` layer nor attention, so nothing would be dropped",
            M::SCHEDULE.model
        )));
    }
    Ok(())
}

/// Refuses, before allocating anything, a run whose parameters, gradients, optimizer state and
/// activations cannot fit in the memory this machine has available (or in any address space).
fn check_memory(config: &TrainConfig, schedule: &Schedule, run: &RunShape) -> Result<()> {
    const GIB: f64 = (1u64 << 30) as f64;
    let needed = crate::memory::needed_bytes(schedule, run);
    let available = crate::memory::available_bytes();
    match (needed, available) {
        (None, _) => Err(Error::Config(format!(
            "{} with a batch of {} samples per rank needs more memory than any machine can address",
            schedule.model, config.batch
        ))),
        (Some(needed), Some(available)) if needed as u64 > available => Err(Error::Config(format!(
            "{} with a batch of {} samples per rank needs about {:.1} GiB per rank (parameters, gradients, \
             optimizer state, and {:.1} GiB of activations, which a smaller `TrainConfig::batch` reduces); this \
             machine has {:.1} GiB available",
            schedule.model,
            config.batch,
            needed as f64 / GIB,
            run.activation_bytes.unwrap_or(0) as f64 / GIB,
            available as f64 / GIB
        ))),
        _ => Ok(()),
    }
}

/// Refuses recording that rank 0 could not hold: one window of every rank's spans (a huge
/// `--report-every`, or `--accumulate`), or, with `--trace`, every span of the run.
pub fn check_recording(config: &TrainConfig, schedule: &Schedule, run: &RunShape, world: usize) -> Result<()> {
    if !config.observe.records() {
        return Ok(());
    }
    let needs = crate::observe::recording_bytes(&config.observe, schedule, run, world);
    let available = crate::memory::available_bytes();
    let beyond = |bytes: Option<u64>| match (bytes, available) {
        (None, _) => Some("more memory than any machine can address".to_string()),
        (Some(b), Some(a)) if b > a => {
            Some(format!("about {} at rank 0, and this machine has {} available", gib(b), gib(a)))
        }
        _ => None,
    };
    let per_step = needs.spans_per_step.map_or("more than 2^64".into(), |n| n.to_string());
    if let Some(why) = beyond(needs.window) {
        return Err(Error::Config(format!(
            "the report gathers the spans of {} step(s) at once from {world} rank(s) \
             (`ObserveConfig::report_every`; {per_step} spans per step with `TrainConfig::accumulate` {}): that \
             needs {why}; give a smaller {}",
            needs.window_steps,
            config.accumulate,
            if needs.window_steps > 1 { "`ObserveConfig::report_every`" } else { "`TrainConfig::accumulate`" }
        )));
    }
    if let Some(why) = beyond(needs.trace) {
        return Err(Error::Config(format!(
            "`ObserveConfig::trace` keeps every span of the run at rank 0: {} steps of {per_step} spans from {world} rank(s) \
             need {why}; trace a shorter run",
            config.steps
        )));
    }
    Ok(())
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Runs `check` on rank 0 and makes every rank share its verdict, so that a refusal there ends
/// the run on every rank instead of leaving the others waiting in the first all-reduce.
pub fn on_rank0<T>(comm: &Communicator, check: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
    let outcome = (comm.rank() == 0).then(check);
    let mut ok = [u8::from(!matches!(outcome, Some(Err(_))))];
    comm.broadcast_bytes_from_root(&mut ok)?;
    match outcome {
        Some(result) => result.map(Some),
        None if ok[0] == 1 => Ok(None),
        None => Err(Error::Config("rank 0 refused to start (its message says why)".into())),
    }
}

/// Settings that sharded optimizer state cannot run with, refused by name. Each rank updates its
/// own slice of a bucket on the communication thread, with state for that slice alone (after the
/// step's global norm when it clips or checks the sums): nothing may send something else than
/// the sums (PowerSGD's factors).
fn check_sharding(config: &TrainConfig, schedule: &Schedule) -> Result<()> {
    if !config.comm.shard_optimizer.unwrap_or(schedule.shard_optimizer) {
        return Ok(());
    }
    let how = sharded_by(config, schedule);
    let low_rank = schedule.buckets.iter().find_map(|b| b.low_rank);
    // A run-time format sends such buckets whole, but through the same low-rank path.
    let whole = if config.comm.grad_comm.is_some() { ", even sent whole (`CommConfig::grad_comm`)" } else { "" };
    let conflicts = [low_rank
        .map(|r| format!("the model's `grad_comm = {r}`: PowerSGD's buckets cannot be reduce-scattered{whole}"))];
    let conflicts: Vec<String> = conflicts.into_iter().flatten().collect();
    if conflicts.is_empty() {
        return Ok(());
    }
    let instead = if config.comm.shard_optimizer.is_some() {
        "keep the optimizer state whole (`CommConfig::shard_optimizer` left unset)".to_string()
    } else {
        format!(
            "keep the optimizer state whole (`CommConfig::shard_optimizer` false), or compile {} without \
             `shard_optimizer` or without PowerSGD",
            schedule.model
        )
    };
    Err(Error::Config(format!(
        "{how} shards the optimizer state, which this run cannot do with {}; {instead}",
        conflicts.join("; ")
    )))
}

/// Who chose to shard the optimizer state: the run, or the model's attribute.
fn sharded_by(config: &TrainConfig, schedule: &Schedule) -> String {
    if config.comm.shard_optimizer.is_some() {
        "`CommConfig::shard_optimizer`".to_string()
    } else {
        format!("{}'s `#[distributed_model(shard_optimizer)]`", schedule.model)
    }
}

/// With sharded optimizer state every parameter travels with its bucket to be updated there,
/// which a layer allows by exposing its `Vec` (`Layer::param_vec_mut`); one that does not is
/// refused by name before the first step.
pub(super) fn check_lendable<M: DistributedModel>(
    config: &TrainConfig,
    comm: &Communicator,
    model: &mut M,
) -> Result<()> {
    let schedule = &M::SCHEDULE;
    // The GPU lends nothing: its updates run on the device after the wait points.
    if !comm.shards_optimizer(schedule) || config.device != Device::Cpu {
        return Ok(());
    }
    if comm.mode() == CommMode::Skip && comm.checks_finite() && comm.world_size() > 1 {
        // Its wait points check the whole gradients and update whole parameters, which a
        // rank's slice of the state does not cover.
        return Err(Error::Config(format!(
            "`CommConfig::check_finite` with `CommConfig::mode` compute-only is not supported on sharded optimizer \
             state ({}) on {} ranks: turn one of them off",
            sharded_by(config, schedule),
            comm.world_size()
        )));
    }
    let Some(p) = schedule.params().find(|&p| model.param_vec_mut(schedule.param(p).index).is_none()) else {
        return Ok(());
    };
    let layer = &schedule.layers[p.layer];
    Err(Error::Config(format!(
        "{} shards the optimizer state, which lends every parameter to its bucket's reduce-scatter, but `{}` \
         (layer `{}`, a {}) does not expose its `Vec` (`Layer::param_vec_mut`); implement it, or turn sharding off \
         (`CommConfig::shard_optimizer` false)",
        sharded_by(config, schedule),
        schedule.param_name(p),
        layer.name,
        layer.kind
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ValidationConfig;
    use crate::data::Batch;

    /// A finite set of `.0` samples that fills nothing.
    struct Holds(u64);

    impl Dataset for Holds {
        fn fill(&mut self, _: u64, _: usize, _: &mut Batch) -> Result<()> {
            Ok(())
        }
        fn features(&self) -> usize {
            4
        }
        fn len(&self) -> Option<u64> {
            Some(self.0)
        }
    }

    #[test]
    fn a_set_smaller_than_what_is_read_together_is_noted() {
        let config = TrainConfig {
            batch: 8,
            accumulate: 2,
            validation: Some(ValidationConfig { every: 10, batches: 3 }),
            ..TrainConfig::default()
        };
        // A step reads 8 x 2 ranks x 2 micro-steps = 32 samples; a measurement 8 x 2 x 3 = 48.
        assert!(repeated_samples(&config, &Holds(32), Some(&Holds(48)), 2).is_empty());
        let notes = repeated_samples(&config, &Holds(31), Some(&Holds(47)), 2);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("holds 31 samples, fewer than the 32 a step reads"), "{notes:?}");
        assert!(notes[1].contains("holds 47 samples, fewer than the 48 a measurement reads"), "{notes:?}");
        assert!(repeated_samples(&config, &SyntheticLike, None, 2).is_empty(), "a set without end");
    }

    #[test]
    fn the_link_note_counts_the_bytes_that_travel() {
        use overlap_plan::{BucketLimits, LayerSpec, Width, WireFormat};
        // One bucket of 4 Mi values: 16 MiB in fp32, 8 MiB in bf16; at 1 MB/s on 2 ranks about 16.8 s and 8.4 s.
        let fc = LayerSpec::new("fc", "Linear<2048, 2048>", Width::Fixed { input: 2048, output: 2048 })
            .with_param("weight", &[2048, 2048]);
        let schedule = overlap_plan::plan_buckets("M", &[fc], &BucketLimits::Unlimited).unwrap();
        let mut config = TrainConfig::default();
        config.comm.link = Some("latency=0us,bandwidth=1MB/s".parse().unwrap());
        config.comm.wait_timeout = Some(std::time::Duration::from_secs(12));
        let note = link_outlasts_timeout(&config, &schedule, 2).expect("fp32: 16.8 s, past 12 s");
        assert!(note.contains("(16.00 MiB) takes 16.78 s"), "{note}");
        config.comm.grad_comm = Some(WireFormat::Bf16);
        assert_eq!(link_outlasts_timeout(&config, &schedule, 2), None, "bf16: 8.4 s, within 12 s");
        let bf16 = schedule.with_grad_comm(overlap_plan::GradComm::Format(WireFormat::Bf16));
        config.comm.grad_comm = None;
        assert_eq!(link_outlasts_timeout(&config, &bf16, 2), None, "the model's own bf16");
    }

    /// Samples without end (`Dataset::len`'s default).
    struct SyntheticLike;

    impl Dataset for SyntheticLike {
        fn fill(&mut self, _: u64, _: usize, _: &mut Batch) -> Result<()> {
            Ok(())
        }
        fn features(&self) -> usize {
            4
        }
    }
}
