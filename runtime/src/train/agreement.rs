//! The settings every rank must share, compared before step 1. Each rank builds its own
//! `TrainConfig` (a command line per process, or a program that reads its own environment), and
//! ranks that differ would apply other updates without a word (another learning rate, batch or
//! optimizer), or wait in a collective the others never start (another step count, log
//! interval, checkpoint or report): a hang, or MPI's own error about mismatched messages. The
//! schedule, the gradients' wire formats and sharding are compared where the communicator takes
//! them; this is the rest. One 64-bit hash per rank when they agree; only when they do not, one
//! more per setting, to name those that differ.

use overlap_plan::Fnv;

use crate::comm::Communicator;
use crate::config::{Device, OptimizerKind, TrainConfig};
use crate::error::{rank_list, Error, Result};

/// Fails on every rank, naming each setting that differs from rank 0's and the ranks that
/// differ, unless every rank runs with the same settings (collective): what a `Trainer` run
/// checks before step 1, and a front end's run of its own kind (`--comm-only`) too.
pub fn agree_on_settings(config: &TrainConfig, comm: &Communicator) -> Result<()> {
    agree(comm, &shared(config, comm))
}

/// Fails on every rank unless every rank holds the same `(setting, value)` list, naming each
/// setting whose value differs from rank 0's, with the ranks (collective; every rank must pass
/// a list of the same length). Also for settings a front end has beyond `TrainConfig` (the
/// command line's seed, its data flags).
pub fn agree(comm: &Communicator, settings: &[(&str, String)]) -> Result<()> {
    if comm.world_size() == 1 {
        return Ok(());
    }
    let mut all = Fnv::new();
    for (name, value) in settings {
        all.str(name);
        all.str(value);
    }
    let hashes = comm.all_gather_u64(all.finish())?;
    if hashes.iter().all(|&h| h == hashes[0]) {
        return Ok(());
    }
    let mut differing = Vec::new();
    for (name, value) in settings {
        let mut one = Fnv::new();
        one.str(value);
        let each = comm.all_gather_u64(one.finish())?;
        let ranks: Vec<usize> = (0..each.len()).filter(|&r| each[r] != each[0]).collect();
        if !ranks.is_empty() {
            differing.push(format!("{name} (rank(s) {}; this rank's: {value})", rank_list(&ranks)));
        }
    }
    Err(Error::Config(format!(
        "ranks run with other settings than rank 0, which every rank must share: {}",
        differing.join(", ")
    )))
}

/// Every rank's `outcome` of a step each rank takes alone (reading its copy of a checkpoint or
/// parameters file): `Ok` on every rank only when it succeeded on every rank, so that a rank
/// whose copy failed stops the others here, named, instead of leaving them in the next
/// collective (collective). `what` says what failed: `load its checkpoint`.
pub fn agree_on_outcome<T>(comm: &Communicator, outcome: Result<T>, what: &str) -> Result<T> {
    let failed = comm.all_gather_u64(u64::from(outcome.is_err()))?;
    let ranks: Vec<usize> = (0..failed.len()).filter(|&r| failed[r] == 1).collect();
    match outcome {
        Err(e) => Err(e),
        Ok(_) if !ranks.is_empty() => {
            Err(Error::Config(format!("rank(s) {} could not {what} (their messages say why)", rank_list(&ranks))))
        }
        Ok(value) => Ok(value),
    }
}

/// `(setting, value)` for each setting the ranks must share, as this rank has it: the values
/// that take effect (an optimizer's defaults filled in, a folder's presence rather than its
/// path, which may differ from node to node), so that only differences that matter count.
fn shared(config: &TrainConfig, comm: &Communicator) -> Vec<(&'static str, String)> {
    let optimizer = &config.optimizer;
    let set = |present: bool| if present { "set" } else { "not set" }.to_string();
    // Values as the settings are written (`adamw`, `json`), not as Rust prints them.
    let word = |value: &dyn std::fmt::Debug| format!("{value:?}").to_lowercase();
    let observe = &config.observe;
    let mut settings = vec![
        ("`TrainConfig::steps`", config.steps.to_string()),
        ("`TrainConfig::batch`", config.batch.to_string()),
        ("`TrainConfig::accumulate`", config.accumulate.to_string()),
        ("`TrainConfig::log_every`", config.log_every.to_string()),
        ("`OptimizerConfig::kind`", word(&optimizer.kind)),
        ("`OptimizerConfig::lr`", optimizer.base_lr().to_string()),
        ("`OptimizerConfig::weight_decay`", optimizer.base_weight_decay().to_string()),
        ("`OptimizerConfig::lr_schedule`", optimizer.lr_schedule.to_string()),
        ("`OptimizerConfig::decay_on`", word(&optimizer.decay_on)),
        ("`OptimizerConfig::clip_grad_norm`", optimizer.clip_grad_norm.map_or_else(|| "off".into(), |m| m.to_string())),
        ("`CommConfig::mode`", comm.mode().name().to_string()),
        ("`CommConfig::transport`", comm.transport().map_or("none", |t| t.name()).into()),
        ("`CommConfig::link`", config.comm.link.map_or_else(|| "none".into(), |l| l.to_string())),
        ("`CommConfig::check_finite`", config.comm.check_finite.to_string()),
        (
            "`TrainConfig::validation`",
            config.validation.map_or_else(|| "none".into(), |v| format!("every {}", v.every)),
        ),
        ("`ValidationConfig::batches`", config.validation.map_or_else(|| "none".into(), |v| v.batches.to_string())),
        ("`SaveConfig::dir`", set(config.save.is_some())),
        (
            "`SaveConfig::every`",
            config.save.as_ref().and_then(|s| s.every).map_or_else(|| "none".into(), |n| n.to_string()),
        ),
        ("`TrainConfig::resume`", set(config.resume.is_some())),
        ("`ObserveConfig::report`", word(&observe.report)),
        ("`ObserveConfig::report_every`", observe.report_every.map_or_else(|| "none".into(), |n| n.to_string())),
        ("`ObserveConfig::trace`", set(observe.trace.is_some())),
        ("`ObserveConfig::timeline`", set(observe.timeline.is_some())),
        ("`ObserveConfig::write_profile`", set(observe.write_profile.is_some())),
        (
            "`ObserveConfig::simulate`",
            match observe.simulate.as_slice() {
                [] => "none".into(),
                clusters => {
                    clusters.iter().map(|c| format!("{} ranks over {}", c.world, c.link)).collect::<Vec<_>>().join("; ")
                }
            },
        ),
        ("`TrainConfig::save_params`", set(config.save_params.is_some())),
        ("`TrainConfig::device`", if config.device == Device::Cpu { "cpu" } else { "cuda" }.into()),
        ("`DropoutConfig::rate`", config.dropout.rate.to_string()),
        ("`DropoutConfig::seed`", config.dropout.seed.to_string()),
        ("`Trainer::stop_on_signals`", config.stop_on_signals.to_string()),
    ];
    // What the chosen optimizer reads, and only that; the same list on every rank, whatever it
    // chose, since `check` runs one collective per entry.
    let (sgd, adamw) = (optimizer.kind == OptimizerKind::Sgd, optimizer.kind == OptimizerKind::AdamW);
    let read = |reads: bool, value: String| if reads { value } else { "unused".into() };
    settings.push(("`OptimizerConfig::momentum`", read(sgd, optimizer.momentum.to_string())));
    settings.push(("`OptimizerConfig::betas`", read(adamw, format!("{:?}", optimizer.betas))));
    settings.push(("`OptimizerConfig::eps`", read(adamw, optimizer.eps.to_string())));
    settings
}
