//! The overlap report: is communication hidden, and if not, where does the step's time go.
//! Built at rank 0 from every rank's step breakdowns; medians over steps. Its text is `report_text`.

use overlap_plan::{Link, Schedule};
use serde::Serialize;

use super::breakdown::StepBreakdown;
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
        let compressed = |s: &&[StepBreakdown]| s.iter().any(|b| b.compress_ns > 0);
        let before = steps.len();
        if steps.iter().any(compressed) {
            steps.retain(compressed);
        }
        let sent_whole_left_out = before - steps.len();
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
        // Per step, the rank that bounds it: its compute or its all-reduce, whichever is longer.
        let lower_bound_ms = median(
            steps.iter().map(|s| s.iter().map(|b| b.compute_ns().max(b.all_reduce_ns)).max().unwrap_or(0) as f64 / 1e6),
        );

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
mod tests {
    use super::*;
    use crate::trace::breakdown::BucketTiming;
    use overlap_plan::{BucketInfo, BucketLimits, LayerInfo, ParamInfo, ParamRef, ReadyOrder, Width, WireFormat};
    use std::borrow::Cow;

    const LAYERS: &[LayerInfo] = &[LayerInfo {
        tied: None,
        name: Cow::Borrowed("fc"),
        kind: Cow::Borrowed("Linear<2, 2>"),
        width: Width::Fixed { input: 2, output: 2 },
        flops_per_sample: 8,
        params: Cow::Borrowed(&[ParamInfo {
            name: Cow::Borrowed("weight"),
            shape: Cow::Borrowed(&[500_000]),
            index: 0,
            bucket: 0,
            offset: 0,
        }]),
        ready: ReadyOrder::Reverse,
    }];
    const BUCKETS: &[BucketInfo] = &[BucketInfo {
        params: Cow::Borrowed(&[ParamRef { layer: 0, param: 0 }]),
        numel: 500_000,
        launch_after: 0,
        wire: WireFormat::Fp32,
        low_rank: None,
    }];
    const SCHEDULE: Schedule = Schedule {
        model: Cow::Borrowed("Tiny"),
        limits: BucketLimits::Unlimited,
        layers: Cow::Borrowed(LAYERS),
        buckets: Cow::Borrowed(BUCKETS),
        shard_optimizer: false,
        gathers: Cow::Borrowed(&[]),
    };

    fn step(step: u64, rank: u32, compute_ms: u64, reduce_ms: u64, exposed_ms: u64) -> StepBreakdown {
        let ms = 1_000_000;
        StepBreakdown {
            step,
            rank,
            step_ns: (compute_ms + exposed_ms) * ms,
            forward_ns: compute_ms * ms / 2,
            backward_ns: compute_ms * ms / 2,
            all_reduce_ns: reduce_ms * ms,
            exposed_ns: exposed_ms * ms,
            buckets: vec![BucketTiming {
                bytes: 2_000_000,
                all_reduce_ns: reduce_ms * ms,
                updates_ns: reduce_ms * ms / 4,
                exposed_ns: exposed_ms * ms,
            }],
            ..StepBreakdown::default()
        }
    }

    /// PowerSGD's buckets go whole for `start_iter` steps, then as factors: the bytes on the
    /// wire, the bucket's times and the compression are one phase's (the compressed one where the
    /// window has it), never medians between the two.
    #[test]
    fn powersgd_bytes_on_the_wire_are_the_compressed_steps_where_there_are_any() {
        let low_rank =
            SCHEDULE.clone().with_grad_comm(overlap_plan::GradComm::LowRank(overlap_plan::LowRank::new(4, 10)));
        let sent = |n: u64| {
            let compressed = n >= 10;
            let mut b = step(n, 0, 10, if compressed { 1 } else { 40 }, 0);
            b.buckets[0].bytes = if compressed { 10_000 } else { 2_000_000 };
            b.compress_ns = if compressed { 3_000_000 } else { 0 };
            b
        };
        // 10 steps sent whole, 8 compressed: medians over all of them would be the whole ones'.
        let both: Vec<StepBreakdown> = (0..18).map(sent).collect();
        let r = OverlapReport::new(&both, &low_rank, 2, CommMode::Overlap, None).unwrap();
        assert_eq!(r.buckets[0].wire_bytes, 10_000);
        assert_eq!((r.buckets[0].all_reduce_ms, r.compression_ms), (1.0, 3.0), "the compressed steps' times");
        // Every row is of the compressed steps: the compute holds the compression it names.
        assert_eq!((r.all_reduce_ms, r.compute_ms, r.steps, r.first_step), (1.0, 13.0, 8, 11));
        assert_eq!(r.sent_whole_left_out, 10);
        assert!(r.to_string().contains("left out: 10 steps that PowerSGD sent whole"), "{r}");
        let whole: Vec<StepBreakdown> = (0..8).map(sent).collect();
        let r = OverlapReport::new(&whole, &low_rank, 2, CommMode::Overlap, None).unwrap();
        assert_eq!(r.buckets[0].wire_bytes, 2_000_000, "before start_iter, the whole buckets");
        assert_eq!((r.all_reduce_ms, r.sent_whole_left_out), (40.0, 0));
    }

    #[test]
    fn medians_over_steps_of_rank_means_and_the_derived_figures() {
        // Steps 0..3 on two ranks; rank 1 is the straggler in every step but the last.
        let b = [
            step(0, 0, 10, 4, 2),
            step(0, 1, 12, 4, 0),
            step(1, 0, 10, 4, 2),
            step(1, 1, 12, 4, 0),
            step(2, 0, 14, 8, 6),
            step(2, 1, 10, 8, 6),
        ];
        let r = OverlapReport::new(&b, &SCHEDULE, 2, CommMode::Overlap, None).unwrap();
        assert_eq!((r.steps, r.first_step, r.last_step), (3, 1, 3));
        assert_eq!((r.compute_ms, r.all_reduce_ms, r.exposed_ms), (11.0, 4.0, 1.0));
        assert_eq!(r.step_ms, 12.0, "the slowest rank's step, median over steps");
        assert_eq!((r.hidden_ms, r.hidden_fraction), (3.0, Some(0.75)));
        // The slowest rank's compute bounds every step here: 12, 12 and 14 ms.
        assert_eq!((r.lower_bound_ms, r.above_lower_bound), (12.0, 0.0));
        // 2 MB in the 3 ms of 4 that were not lent updates, on 2 ranks: algbw 2/3 GB/s, busbw x
        // 2(n-1)/n = 1.
        assert_eq!(r.buckets[0].lent_updates_ms, 1.0);
        assert!((r.buckets[0].bus_bandwidth_gb_s - 2.0 / 3.0).abs() < 1e-12);
        // On an emulated link the updates ran within the time it held the transfer: 4 ms.
        let link = Link { latency_s: 0.0, bandwidth_bytes_per_s: 0.5e9 };
        let held = OverlapReport::new(&b, &SCHEDULE, 2, CommMode::Overlap, Some(link)).unwrap();
        assert!((held.buckets[0].bus_bandwidth_gb_s - 0.5).abs() < 1e-12);
        assert_eq!(r.buckets[0].launched_after, "fc.backward");
        assert_eq!([r.ranks[0].slowest_in_steps, r.ranks[1].slowest_in_steps], [1, 2]);
        assert_eq!(r.straggler_gap_ms, 2.0);
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["hidden_fraction"], 0.75);
        assert!(r.to_string().contains("75.0% of the all-reduce time"));
        assert!(OverlapReport::new(&[], &SCHEDULE, 2, CommMode::Overlap, None).is_none());
    }

    #[test]
    fn memory_lines_give_the_peak_against_the_need_and_its_parts() {
        let mut r =
            OverlapReport::new(&[step(0, 0, 10, 4, 1), step(0, 1, 10, 4, 1)], &SCHEDULE, 2, CommMode::Overlap, None)
                .unwrap();
        r.memory = Some(Memory {
            peak_rss_mib: vec![59.2, 61.0],
            needed_mib: 50.0,
            optimizer_state_mib: 6.25,
            activations_mib: 36.5,
            optimizer_shards: 2,
            communication_only: false,
        });
        let text = r.to_string();
        assert!(text.contains("peak RSS 61.0 MiB (largest rank) for 50.0 MiB of parameters"), "{text}");
        assert!(text.contains("and activations: 1.22x"), "{text}");
        assert!(text.contains("optimizer state: 6.25 MiB per rank, sharded over 2 ranks"), "{text}");
        assert!(text.contains("activations: 36.50 MiB per rank"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["memory"]["activations_mib"], 36.5);
        // A communication-only run holds its gradient buckets alone, and says so.
        r.memory = Some(Memory {
            peak_rss_mib: vec![9.0],
            needed_mib: 4.5,
            optimizer_state_mib: 0.0,
            activations_mib: 0.0,
            optimizer_shards: 1,
            communication_only: true,
        });
        let text = r.to_string();
        assert!(text.contains("peak RSS 9.0 MiB (largest rank) for 4.5 MiB of gradient buckets: 2.00x"), "{text}");
        assert!(!text.contains("optimizer state:") && !text.contains("activations:"), "{text}");
    }

    #[test]
    fn emulation_is_named_and_one_rank_has_nothing_to_hide() {
        let link = Some(Link { latency_s: 5e-6, bandwidth_bytes_per_s: 25e9 });
        let r = OverlapReport::new(
            &[step(0, 0, 10, 4, 1), step(0, 1, 10, 4, 1)],
            &SCHEDULE,
            2,
            CommMode::AfterBackward,
            link,
        );
        let text = r.unwrap().to_string();
        assert!(text.contains("no-overlap") && text.contains("EMULATED LINK: latency 5.000 us, bandwidth 25.000 GB/s"));
        let single = OverlapReport::new(&[step(0, 0, 10, 0, 0)], &SCHEDULE, 1, CommMode::Overlap, link).unwrap();
        assert_eq!((single.hidden_fraction, single.emulated_link.as_deref()), (None, None));
        assert!(single.to_string().contains("one rank: nothing to all-reduce"));
        // Under mpirun a rank's communication thread runs the lent updates, even alone.
        let alone = OverlapReport::new(&[step(0, 0, 10, 4, 1)], &SCHEDULE, 1, CommMode::Overlap, None).unwrap();
        assert_eq!(alone.hidden_fraction, None);
        let skipped =
            OverlapReport::new(&[step(0, 0, 10, 0, 0), step(0, 1, 10, 0, 0)], &SCHEDULE, 2, CommMode::Skip, None);
        let text = skipped.unwrap().to_string();
        assert!(text.contains("compute-only: nothing is all-reduced"), "{text}");
        assert!(!text.contains("  bucket ") && !text.contains("spend waiting"), "no bucket table, no waits:\n{text}");
    }

    #[test]
    fn without_overlap_buckets_wait_for_all_of_backward_and_nothing_is_hidden_below_zero() {
        // Waits longer than the all-reduces (6 ms exposed for 4 ms of summing).
        let r = OverlapReport::new(
            &[step(0, 0, 10, 4, 6), step(0, 1, 10, 4, 6)],
            &SCHEDULE,
            2,
            CommMode::AfterBackward,
            None,
        )
        .unwrap();
        assert_eq!((r.hidden_ms, r.hidden_fraction), (0.0, Some(0.0)));
        assert_eq!(r.buckets[0].launched_after, "all of backward");
        let text = r.to_string();
        assert!(text.contains("steps 1..=1 (1 step;") && text.contains("hidden           0.00 ms  0.0%"), "{text}");
    }

    #[test]
    fn the_wire_column_fits_its_widest_cell_and_the_columns_after_it_line_up() {
        let mut r =
            OverlapReport::new(&[step(0, 0, 10, 4, 1), step(0, 1, 10, 4, 1)], &SCHEDULE, 2, CommMode::Overlap, None)
                .unwrap();
        let mut second = r.buckets[0].clone();
        (second.bucket, second.wire_format, second.wire_bytes) = (1, "rank 4".into(), 500);
        // A layer name longer than the column's least width widens it, for every row.
        second.launched_after = "h.11.attend.attn.fc.backward".into();
        (r.buckets[0].wire_format, r.buckets[0].wire_bytes) = ("rank 4".into(), 1023 * 1024 + 512);
        r.buckets.push(second);
        let text = r.to_string();
        let table: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("  bucket")).take(3).collect();
        let column = |line: &str, what: &str| line.find(what).unwrap_or_else(|| panic!("{what} in {line:?}"));
        let launched = column(table[0], "launched after");
        assert!(table[1].contains("  rank 4 1023.5 KiB") && table[2].contains("  rank 4 500 B"), "{text}");
        assert_eq!((column(table[1], "fc.backward"), column(table[2], "h.11.attend")), (launched, launched), "{text}");
        // Each heading ends where its figures do.
        let end = |line: &str, what: &str| column(line, what) + what.len();
        for (heading, figure) in [("bytes", "MiB"), ("all-reduce", " ms"), ("busbw", "GB/s"), ("exposed", "1.00 ms")] {
            assert_eq!(end(table[0], heading), end(table[1], figure), "{heading} in {text}");
        }
        for (heading, figure) in [("all-reduce", " ms"), ("busbw", "GB/s")] {
            assert_eq!(end(table[0], heading), end(table[2], figure), "{heading} in {text}");
        }
    }
}
