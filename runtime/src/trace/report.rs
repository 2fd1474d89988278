//! The overlap report: is communication hidden, and if not, where does the step's time go.
//! Built at rank 0 from every rank's step breakdowns; medians over steps. Its text is `report_text`.

use overlap_plan::{Link, Schedule};
use serde::Serialize;

use super::breakdown::{keep_compressed, StepBreakdown};
use super::bucket_report::{bucket_reports, BucketReport};
use super::stats::{median, median_of_rank_means};
use crate::comm::CommMode;

/// Medians over steps of the per-step mean over ranks (the step time: of the slowest rank).
#[derive(Clone, Debug, Serialize)]
pub struct OverlapReport {
    /// The model struct's name, from the schedule.
    pub model: String,
    /// Ranks in the run.
    pub world_size: usize,
    /// `overlap` or `no-overlap`.
    pub mode: &'static str,
    /// The interconnect emulated by holding each all-reduce, if any.
    pub emulated_link: Option<String>,
    /// What summed the gradients: `shared-memory` or `mpi` (absent for one rank or no reductions).
    pub transport: Option<&'static str>,
    /// Number of steps the medians are over.
    pub steps: usize,
    /// 1, or, in a run too long to keep every step, `n`: the medians are over every `n`-th step
    /// of `first_step..=last_step`.
    pub sampled_every: u64,
    /// The first and last step reported, counted from 1 as the log lines count them.
    pub first_step: u64,
    /// The last step reported, counted from 1.
    pub last_step: u64,
    /// The step, as each step's slowest rank took it.
    pub step_ms: f64,
    /// Every layer's forward, summed over micro-steps.
    pub forward_ms: f64,
    /// The loss and its gradient, summed over micro-steps.
    pub loss_ms: f64,
    /// Every layer's backward, summed over micro-steps.
    pub backward_ms: f64,
    /// The optimizer updates on the compute thread, the clip's global norm included.
    pub optimizer_ms: f64,
    /// PowerSGD's compression on the compute thread (0 without it).
    pub compression_ms: f64,
    /// Forward + loss + backward + optimizer + compression.
    pub compute_ms: f64,
    /// Sum over buckets of the all-reduce time on the communication thread.
    pub all_reduce_ms: f64,
    /// Time the compute thread spent blocked in wait points.
    pub exposed_ms: f64,
    /// The rest of the step: loading data, bookkeeping between layers.
    pub other_ms: f64,
    /// Of the step, the host filling batches: the next step's while the device works on this
    /// one (on the CPU, while the last sums are in flight), so part of `other_ms` on the CPU,
    /// beside the GPU's work on a GPU.
    pub data_ms: f64,
    /// `all_reduce_ms - exposed_ms`.
    pub hidden_ms: f64,
    /// `1 - exposed / all-reduce`; absent when nothing was reduced (one rank).
    pub hidden_fraction: Option<f64>,
    /// `max(compute, communication)` of each step's slowest rank, median over steps: no
    /// schedule can beat it.
    pub lower_bound_ms: f64,
    /// `step / lower bound - 1`.
    pub above_lower_bound: f64,
    /// One row per bucket, in launch order.
    pub buckets: Vec<BucketReport>,
    /// One row per rank, in rank order.
    pub ranks: Vec<RankReport>,
    /// Median over steps of the slowest rank's compute minus the fastest's.
    pub straggler_gap_ms: f64,
    /// The simulator's prediction for this very run (from its per-layer times and its emulated
    /// link), when a link was emulated.
    pub predicted: Option<PredictedStep>,
    /// Peak memory against what training needs, in the final report.
    pub memory: Option<Memory>,
    /// The sharded optimizer state's all-gathers, when they ran in forward.
    pub all_gather: Option<GatherReport>,
    /// Steps that began after a pause while their all-gathers ran in it, if there were any.
    pub after_pause: Option<AfterPause>,
    /// Steps PowerSGD sent whole (its `start_iter`) left out, every row being of the steps that
    /// sent its factors; 0 where there were none, or no step sent factors.
    pub sent_whole_left_out: usize,
}

/// Steps of a sharded run that began after a pause outside any step (a gather of the report's
/// spans, a validation, a checkpoint): their all-gathers ran during it, so their forward found
/// them done and they read as hidden, the step as short.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterPause {
    /// This many were left out of the medians.
    LeftOut(usize),
    /// `paused` of the `of` steps reported began after one, too many to leave out (a report
    /// every step or two): they are kept, and the report says so.
    Kept {
        /// Steps reported that began after a pause.
        paused: usize,
        /// Steps reported.
        of: usize,
    },
}

/// The all-gathers of sharded optimizer state in the next forward (part of `all_reduce_ms` and
/// `exposed_ms`, which count both halves of each bucket's reduction).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct GatherReport {
    /// Sum over buckets on the communication thread.
    pub all_gather_ms: f64,
    /// The forward's time blocked in their wait points.
    pub waited_ms: f64,
    /// `1 - waited / all-gather`.
    pub hidden_fraction: f64,
}

/// Memory of the run's ranks against what training needs, in MiB.
#[derive(Clone, Debug, Serialize)]
pub struct Memory {
    /// Peak resident set size of each rank (Linux `VmHWM`), MiB.
    pub peak_rss_mib: Vec<f64>,
    /// Parameters + gradients + optimizer state + activations of one rank, MiB.
    pub needed_mib: f64,
    /// The optimizer state of the rank that keeps the most, MiB.
    pub optimizer_state_mib: f64,
    /// What a micro-step keeps from forward for backward (part of `needed_mib`), MiB.
    pub activations_mib: f64,
    /// Ranks the optimizer state is sharded over; 1 when each keeps all of it.
    pub optimizer_shards: usize,
    /// A communication-only run: `needed_mib` is its gradient buckets, and it holds no
    /// parameters, optimizer state or activations.
    pub communication_only: bool,
}

/// What the simulator predicts for the run's step, in milliseconds, to set beside the measured
/// figures.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PredictedStep {
    /// The whole step: forward, backward, updates and the waits between them.
    pub step_ms: f64,
    /// Sum of the collectives' times (the all-gathers' included).
    pub all_reduce_ms: f64,
    /// Time the compute thread waits in wait points.
    pub exposed_ms: f64,
    /// The sharded state's all-gathers in forward (part of `all_reduce_ms`), and the forward's
    /// wait for them (part of `exposed_ms`); 0 without.
    pub all_gather_ms: f64,
    /// Of `exposed_ms`, the forward's wait for the all-gathers; 0 without.
    pub gather_exposed_ms: f64,
}

/// One rank's figures, medians over the steps.
#[derive(Clone, Debug, Serialize)]
pub struct RankReport {
    /// Which rank, from 0.
    pub rank: usize,
    /// Steps in which this rank had the most compute.
    pub slowest_in_steps: usize,
    /// Its compute: forward, loss, backward, compression and optimizer.
    pub compute_ms: f64,
    /// Its time blocked in wait points.
    pub exposed_ms: f64,
}

impl OverlapReport {
    /// `None` when `breakdowns` holds no complete step.
    pub fn new(
        breakdowns: &[StepBreakdown],
        schedule: &Schedule,
        world_size: usize,
        mode: CommMode,
        link: Option<Link>,
    ) -> Option<Self> {
        let mut steps: Vec<&[StepBreakdown]> = breakdowns.chunk_by(|a, b| a.step == b.step).collect();
        steps.retain(|s| !s.is_empty());
        // PowerSGD compresses only after its `start_iter` steps sent whole: where some steps
        // compressed, every row is of those (the run's steady state), not some rows of each.
        let sent_whole_left_out = keep_compressed(&mut steps);
        if steps.is_empty() {
            return None;
        }
        let mean = |f: &dyn Fn(&StepBreakdown) -> u64| median_of_rank_means(&steps, f);
        let step_ms = median(steps.iter().map(|s| s.iter().map(|b| b.step_ns).max().unwrap_or(0) as f64 / 1e6));
        let (forward_ms, loss_ms) = (mean(&|b| b.forward_ns), mean(&|b| b.loss_ns));
        let (backward_ms, optimizer_ms) = (mean(&|b| b.backward_ns), mean(&|b| b.update_ns));
        let compression_ms = mean(&|b| b.compress_ns);
        let compute_ms = mean(&|b| b.compute_ns());
        let (all_reduce_ms, exposed_ms) = (mean(&|b| b.all_reduce_ns), mean(&|b| b.exposed_ns));
        let (all_gather_ms, gather_waited_ms) = (mean(&|b| b.all_gather_ns), mean(&|b| b.gather_exposed_ns));
        let all_gather = (all_gather_ms > 0.0).then(|| GatherReport {
            all_gather_ms,
            waited_ms: gather_waited_ms,
            hidden_fraction: (1.0 - gather_waited_ms / all_gather_ms).clamp(0.0, 1.0),
        });
        let other_ms = mean(&|b| b.step_ns.saturating_sub(b.compute_ns() + b.exposed_ns));
        let data_ms = mean(&|b| b.fill_ns);
        // Per step, the rank that bounds it: its compute or its all-reduce, whichever is longer. A
        // transfer on the wire before the step began (an all-gather since the update before, after
        // a pause) counts whole in `all_reduce_ns`, but only its part inside the step bounds it.
        let bound = |b: &StepBreakdown| b.compute_ns().max(b.all_reduce_ns.min(b.step_ns));
        let lower_bound_ms = median(steps.iter().map(|s| s.iter().map(bound).max().unwrap_or(0) as f64 / 1e6));

        let buckets = bucket_reports(&steps, schedule, world_size, mode, link);

        // No rank is the slowest of a step that computed nothing (`--comm-only`).
        let slowest = |s: &[StepBreakdown]| {
            s.iter().filter(|b| b.compute_ns() > 0).max_by_key(|b| b.compute_ns()).map(|b| b.rank as usize)
        };
        let ranks = (0..world_size)
            .map(|rank| {
                let mine = || steps.iter().filter_map(move |s| s.iter().find(|b| b.rank as usize == rank));
                RankReport {
                    rank,
                    slowest_in_steps: steps.iter().filter(|s| slowest(s) == Some(rank)).count(),
                    compute_ms: median(mine().map(|b| b.compute_ns() as f64 / 1e6)),
                    exposed_ms: median(mine().map(|b| b.exposed_ns as f64 / 1e6)),
                }
            })
            .collect();
        let gap = |s: &[StepBreakdown]| {
            let compute = s.iter().map(StepBreakdown::compute_ns);
            (compute.clone().max().unwrap_or(0) - compute.min().unwrap_or(0)) as f64 / 1e6
        };

        Some(OverlapReport {
            model: schedule.model.to_string(),
            world_size,
            mode: mode.name(),
            emulated_link: link.filter(|_| world_size > 1).map(|l| l.to_string()),
            transport: None,
            steps: steps.len(),
            sampled_every: 1,
            first_step: steps[0][0].step + 1,
            last_step: steps[steps.len() - 1][0].step + 1,
            step_ms,
            forward_ms,
            loss_ms,
            backward_ms,
            optimizer_ms,
            compression_ms,
            compute_ms,
            all_reduce_ms,
            exposed_ms,
            other_ms,
            data_ms,
            // Waits can outlast the all-reduces they wait for (a slower rank, scheduling): then
            // nothing was hidden, rather than a negative amount.
            hidden_ms: (all_reduce_ms - exposed_ms).max(0.0),
            // One rank reduces nothing: its communication thread's time is updates alone.
            hidden_fraction: (all_reduce_ms > 0.0 && world_size > 1)
                .then(|| (1.0 - exposed_ms / all_reduce_ms).clamp(0.0, 1.0)),
            lower_bound_ms,
            above_lower_bound: if lower_bound_ms > 0.0 { step_ms / lower_bound_ms - 1.0 } else { 0.0 },
            buckets,
            ranks,
            straggler_gap_ms: median(steps.iter().map(|s| gap(s))),
            predicted: None,
            memory: None,
            all_gather,
            after_pause: None,
            sent_whole_left_out,
        })
    }

    /// The report as one line of JSON (the `--report json` output).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("the report holds only numbers and strings")
    }
}

#[cfg(test)]
mod tests;
