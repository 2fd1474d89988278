//! What a training run records and writes about itself: spans while it runs, then the overlap
//! report, the Chrome trace and the timeline picture at rank 0.
//!
//! Spans are gathered to rank 0 in windows (every `--report-every` steps, or as `window` sizes
//! them), outside the timed steps, so no rank's buffer grows with the run's length; rank 0 keeps
//! per-step breakdowns of a bounded number of steps, and raw spans only when a trace file was
//! asked for.

mod config;
mod strided;
mod window;

pub use config::{ObserveConfig, ReportFormat};
pub use window::{recording_bytes, RecordingBytes};

use std::borrow::Cow;

use overlap_plan::{sim_buckets, simulate_sharded, Link, Schedule, SimSharding, StepCosts};

use crate::comm::{CommMode, Communicator, Transport, WireFormat};
use crate::error::Result;
use crate::memory::{needed_bytes, optimizer_state_bytes, peak_rss_bytes, RunShape};
use crate::process::console;
use crate::profile;
use crate::trace::{
    self, Activity, AfterPause, Memory, OverlapReport, PredictedStep, RunInfo, SampledSteps, Span, StepBreakdown,
};
use strided::Strided;
use window::{spans_per_step, window, RESERVED_SPANS};

/// The windows' candidate steps for the timeline kept at rank 0, each with its spans: past it,
/// evenly spaced windows of the run (`Strided`), in memory that does not grow with its length.
const MAX_TIMELINE_CANDIDATES: usize = 64;

/// One run's recording, at every rank: starts the spans, gathers them to rank 0 every window
/// of steps, and there prints the reports and writes the files the `ObserveConfig` asks for.
pub struct Observer<'a> {
    config: &'a ObserveConfig,
    run: RunShape,
    schedule: Schedule,
    world_size: usize,
    rank: usize,
    mode: CommMode,
    link: Option<Link>,
    /// What sums the gradients (`None` for one rank).
    transport: Option<Transport>,
    /// How the optimizer state is kept, as the simulator runs it (`profile::sim_sharding`).
    sharding: SimSharding,
    recording: bool,
    window: u64,
    /// Whether the sharded state's all-gathers for a step are in flight before it begins.
    gathers_in_forward: bool,
    /// Steps that began after a pause (a gather of spans, a validation, a checkpoint) while
    /// their all-gathers ran in it: their forward found them done, so the report leaves them out.
    after_pause: Vec<u64>,
    /// At rank 0: the gathered steps' breakdowns, by step then rank (every step of a run of up
    /// to `trace::sampled_steps::MAX_STEPS`, evenly spaced ones of a longer one).
    breakdowns: SampledSteps,
    /// At rank 0, with `--trace`: every gathered span.
    all_spans: Vec<Span>,
    /// At rank 0, with `--timeline`: each gathered window's representative step, its time
    /// (slowest rank) and its spans, from which the one nearest the run's median is drawn (at
    /// most `MAX_TIMELINE_CANDIDATES`, evenly spaced windows of a long run).
    timeline_candidates: Strided<(u64, u64, Vec<Span>)>,
    /// The first step recorded (0, or where a resumed run began): a warm-up, left out of the
    /// measured costs and the timeline's choice.
    warm_up: Option<u64>,
}

impl<'a> Observer<'a> {
    /// Starts recording if any output needs it, with a common time zero on all ranks.
    pub fn start(
        config: &'a ObserveConfig,
        mut run: RunShape,
        comm: &Communicator,
        schedule: Schedule,
    ) -> Result<Self> {
        let sharded = comm.shards_optimizer(&schedule);
        if sharded {
            run.optimizer_shards = comm.world_size();
        }
        // Timing the communication alone (`trains` false) runs whole all-reduces: no gathers.
        let gathers_in_forward = run.trains && comm.gathers_in_forward(&schedule);
        let recording = config.records();
        let per_step = spans_per_step(&schedule, run.accumulate);
        let window = window(config, per_step);
        if recording {
            let per_step = per_step.unwrap_or(usize::MAX);
            let steps = usize::try_from(window.min(run.steps)).unwrap_or(usize::MAX);
            let epoch = trace::clock::common_epoch(comm)?;
            trace::start(comm.rank(), per_step.saturating_mul(steps).min(RESERVED_SPANS), epoch);
        }
        Ok(Observer {
            config,
            run,
            world_size: comm.world_size(),
            rank: comm.rank(),
            mode: comm.mode(),
            // Compute-only sends nothing: no link to emulate, and nothing to label as emulated.
            link: comm.emulated_link().filter(|_| comm.world_size() > 1 && comm.mode() != CommMode::Skip),
            transport: comm.transport(),
            sharding: profile::sim_sharding(sharded),
            schedule: as_sent(schedule, comm),
            recording,
            window,
            gathers_in_forward,
            after_pause: Vec::new(),
            breakdowns: SampledSteps::default(),
            all_spans: Vec::new(),
            timeline_candidates: Strided::new(MAX_TIMELINE_CANDIDATES),
            warm_up: None,
        })
    }

    /// The run's first recorded step (its warm-up).
    fn first_step(&self) -> u64 {
        self.warm_up.unwrap_or(0)
    }

    /// `[emulated link ...]` for every line printed under emulation.
    pub fn emulation_note(&self) -> String {
        self.link.map(|l| format!(" [EMULATED LINK: {l}]")).unwrap_or_default()
    }

    /// Log lines go to stderr when stdout carries JSON reports.
    pub fn say(&self, line: &str) {
        if self.rank != 0 {
            return;
        }
        if self.config.report == ReportFormat::Json {
            console::err_line(line);
        } else {
            console::out_line(line);
        }
    }

    /// After step `step` (0-based) has finished on this rank: gathers a full window.
    pub fn after_step(&mut self, step: u64, comm: &Communicator) -> Result<()> {
        if !self.recording || !(step + 1).is_multiple_of(self.window) {
            return Ok(());
        }
        let fresh = self.gather(comm)?;
        self.paused_after(step);
        // Every window is reported, the last one too, unless it is the whole run: `finish`
        // reports that.
        // (A resumed run's first step is not 0.)
        let whole_run = step + 1 == self.run.steps && step < self.first_step() + self.window;
        if self.config.report_every.is_some() && !whole_run {
            let (kept, after_pause) = self.undisturbed(&fresh);
            let costs = self.link.and_then(|_| profile::measured_costs(&kept, &self.schedule, self.first_step()));
            self.print_report(&kept, (after_pause, (1, None)), costs.as_ref(), None);
        }
        Ok(())
    }

    /// Step `step` (0-based) was followed by a pause outside any step: with sharded optimizer
    /// state the next step's all-gathers ran during it, and that step is left out of reports.
    pub fn paused_after(&mut self, step: u64) {
        if self.gathers_in_forward && self.after_pause.last() < Some(&(step + 1)) {
            self.after_pause.push(step + 1);
        }
    }

    /// `breakdowns` without the steps that followed a pause, unless they are most of them (a
    /// report every step or two: then all are kept); and what became of those steps.
    fn undisturbed<'b>(&self, breakdowns: &'b [StepBreakdown]) -> (Cow<'b, [StepBreakdown]>, Option<AfterPause>) {
        let paused = |b: &StepBreakdown| self.after_pause.binary_search(&b.step).is_ok();
        let steps = |of: &mut dyn Iterator<Item = &StepBreakdown>| {
            let mut steps: Vec<u64> = of.map(|b| b.step).collect();
            steps.dedup();
            steps.len()
        };
        let (left_out, of) = (steps(&mut breakdowns.iter().filter(|b| paused(b))), steps(&mut breakdowns.iter()));
        match left_out {
            0 => (Cow::Borrowed(breakdowns), None),
            n if 2 * n > of => (Cow::Borrowed(breakdowns), Some(AfterPause::Kept { paused: n, of })),
            n => (breakdowns.iter().filter(|b| !paused(b)).cloned().collect(), Some(AfterPause::LeftOut(n))),
        }
    }

    /// After the last step: gathers what is left and writes every output asked for.
    pub fn finish(&mut self, comm: &Communicator) -> Result<()> {
        if !self.recording {
            return Ok(());
        }
        // Every rank decides alike (a gather is collective): only a partial last window is left.
        if !self.run.steps.is_multiple_of(self.window) {
            self.gather(comm)?;
        }
        trace::stop();
        let rss = comm.all_gather_u64(peak_rss_bytes().unwrap_or(0))?;
        if self.rank != 0 {
            return Ok(());
        }
        let memory = Memory {
            peak_rss_mib: rss.iter().map(|&b| b as f64 / MIB).collect(),
            needed_mib: self.needed_bytes() as f64 / MIB,
            optimizer_state_mib: optimizer_state_bytes(&self.schedule, &self.run).unwrap_or(usize::MAX) as f64 / MIB,
            activations_mib: self.run.activation_bytes.unwrap_or(usize::MAX) as f64 / MIB,
            optimizer_shards: self.run.optimizer_shards,
            communication_only: !self.run.trains,
        };
        let sampled = self.breakdowns.take();
        let (all, after_pause) = self.undisturbed(&sampled.breakdowns);
        let costs = profile::measured_costs(&all, &self.schedule, self.first_step());
        let spans = (sampled.every, sampled.last);
        self.print_report(&all, (after_pause, spans), costs.as_ref(), Some(memory));
        if let (Some(path), Some(costs)) = (&self.config.write_profile, &costs) {
            let batch = self.run.batch * self.run.accumulate;
            // A link without a bandwidth (`latency=5us` alone) has no finite one to plan with,
            // which a profile's reader refuses: the profile then records none.
            let link = self.link.filter(|l| l.bandwidth_bytes_per_s.is_finite());
            profile::write_profile(path, &self.schedule, costs, self.world_size, batch, link)?;
            self.say(&format!("profile: {}{}", path.display(), self.emulation_note()));
            if link.is_none() && self.link.is_some() {
                self.say(
                    "note: the profile records no link: the emulated one has no bandwidth limit to plan with; name \
                     one where it is used (`buckets = profile(\"..\", link = \"ib-ndr\")`)",
                );
            }
        }
        for &cluster in &self.config.simulate {
            if let Some(costs) = &costs {
                let rows = profile::predictions(&self.schedule, costs, cluster, self.sharding);
                // Rank 0 alone reaches here (`finish` returned on the others).
                match self.config.report {
                    ReportFormat::Json => {
                        console::out_line(&profile::prediction_json(&self.schedule.model, cluster, &rows))
                    }
                    _ => self.say(profile::prediction_table(&self.schedule.model, cluster, &rows).trim_end()),
                }
            }
        }
        let info = RunInfo {
            schedule: &self.schedule,
            world_size: self.world_size,
            mode: if self.run.trains { self.mode.name() } else { COMMUNICATION_ONLY },
            emulated_link: self.link.map(|l| l.to_string()),
        };
        if let Some(path) = &self.config.trace {
            trace::write_chrome_trace(path, &self.all_spans, &info)?;
            self.say(&format!("trace: {} ({} spans){}", path.display(), self.all_spans.len(), self.emulation_note()));
        }
        if let Some(path) = &self.config.timeline {
            // The run's median step time, and of the windows' candidates the nearest to it.
            let target = trace::representative_step(&all, self.first_step())
                .and_then(|step| step_time(&all, step))
                .map_or(0.0, |ns| ns as f64);
            // A window of the warm-up step alone gives it as its candidate: ranked after every
            // other step, drawn only when no other step ran; so is a step PowerSGD sent whole,
            // where it compressed others (the report reads only those).
            let compressed =
                |c: &(u64, u64, Vec<Span>)| c.2.iter().any(|s| matches!(s.activity, Activity::Compress { .. }));
            let any_compressed = self.timeline_candidates.kept().any(compressed);
            let key = |c: &(u64, u64, Vec<Span>)| {
                ((c.0 == self.first_step(), any_compressed && !compressed(c)), (c.1 as f64 - target).abs())
            };
            let nearest = self
                .timeline_candidates
                .kept()
                .min_by(|a, b| key(a).0.cmp(&key(b).0).then(key(a).1.total_cmp(&key(b).1)));
            if let Some((step, _, spans)) = nearest {
                trace::write_timeline(path, spans, *step, &info)?;
                self.say(&format!("timeline: {} (step {}){}", path.display(), step + 1, self.emulation_note()));
            }
        }
        Ok(())
    }

    /// Gathers the spans recorded since the last gather; at rank 0 returns their breakdowns.
    fn gather(&mut self, comm: &Communicator) -> Result<Vec<StepBreakdown>> {
        let Some(spans) = trace::gather_spans(comm)? else { return Ok(Vec::new()) };
        let fresh = trace::breakdowns(&spans, self.schedule.layers.len(), self.schedule.buckets.len());
        if let (None, Some(first)) = (self.warm_up, fresh.first()) {
            self.warm_up = Some(first.step);
        }
        self.breakdowns.extend(&fresh);
        if self.config.timeline.is_some() {
            let window = self.undisturbed(&fresh).0;
            if let Some(step) = trace::representative_step(&window, self.first_step()) {
                let time = step_time(&window, step).unwrap_or(0);
                let spans = &spans;
                self.timeline_candidates
                    .offer(|| (step, time, spans.iter().filter(|s| s.step == step).cloned().collect()));
            }
        }
        if self.config.trace.is_some() {
            self.all_spans.extend_from_slice(&spans);
        }
        Ok(fresh)
    }

    /// Parameters, gradients, optimizer state and activations of one rank, in bytes.
    fn needed_bytes(&self) -> usize {
        needed_bytes(&self.schedule, &self.run).unwrap_or(usize::MAX)
    }

    /// `costs`: the per-layer times measured over `breakdowns`, for the simulator's prediction;
    /// `after_pause`: as `undisturbed` says; `every`: one step in how many `breakdowns` holds, of
    /// the steps up to `last` (counted from 0).
    fn print_report(
        &self,
        breakdowns: &[StepBreakdown],
        (after_pause, (every, last)): (Option<AfterPause>, (u64, Option<u64>)),
        costs: Option<&StepCosts>,
        memory: Option<Memory>,
    ) {
        if self.config.report == ReportFormat::Off {
            return;
        }
        // Steps PowerSGD sent whole alone (all before its `start_iter`): reported, and simulated,
        // as whole buckets.
        let whole;
        let low_rank = self.schedule.buckets.iter().any(|b| b.low_rank.is_some());
        let schedule = if low_rank && breakdowns.iter().all(|b| b.compress_ns == 0) {
            whole = sent_whole(self.schedule.clone());
            &whole
        } else {
            &self.schedule
        };
        let mut report = OverlapReport::new(breakdowns, schedule, self.world_size, self.mode, self.link);
        if let Some(r) = &mut report {
            r.memory = memory;
            r.after_pause = after_pause;
            if every > 1 {
                // The sample spans the run: its range is the run's, up to its last step.
                r.sampled_every = every;
                r.last_step = last.map_or(r.last_step, |l| l + 1);
            }
            // One rank sends nothing, whatever the transport.
            let sends = self.mode != CommMode::Skip && self.world_size > 1;
            r.transport = self.transport.filter(|_| sends).map(Transport::name);
            if !self.run.trains {
                r.mode = COMMUNICATION_ONLY;
            }
        }
        // Under an emulated link the simulator can be checked against this very run (one that
        // trains: the prediction's step computes and updates).
        let costs = costs.filter(|_| self.run.trains);
        if let (Some(r), Some(link), Some(costs)) = (&mut report, self.link, costs) {
            let overlap = self.mode == CommMode::Overlap;
            let buckets = sim_buckets(schedule);
            let reads = self.schedule.gather_groups();
            let p = simulate_sharded(&buckets, &reads, costs, (&link, self.world_size), overlap, self.sharding);
            r.predicted = Some(PredictedStep {
                step_ms: p.step_s * 1e3,
                all_reduce_ms: p.comm_s * 1e3,
                exposed_ms: p.exposed_s * 1e3,
                all_gather_ms: p.all_gather_s * 1e3,
                gather_exposed_ms: p.gather_exposed_s * 1e3,
            });
        }
        match (report, self.config.report) {
            (Some(r), ReportFormat::Json) => console::out_line(&r.to_json()),
            (Some(r), ReportFormat::Text) => console::out(&r.to_string()),
            (None, _) | (_, ReportFormat::Off) => {}
        }
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// The mode a run that only communicates (`--comm-only`) names in its report, trace and timeline.
const COMMUNICATION_ONLY: &str = "communication only";

/// `schedule` with each bucket's format as `comm` sends it (the schedule's `grad_comm`, or
/// `--grad-comm`), so that the report counts the bytes that travelled.
fn as_sent(mut schedule: Schedule, comm: &Communicator) -> Schedule {
    let sent: Vec<WireFormat> = (0..schedule.buckets.len()).map(|k| comm.wire_format(&schedule, k)).collect();
    for (bucket, wire) in schedule.buckets.to_mut().iter_mut().zip(sent) {
        bucket.wire = wire;
    }
    // A run-time format sends low-rank buckets whole.
    if comm.wire_format_chosen() {
        schedule = sent_whole(schedule);
    }
    schedule
}

/// `schedule` with every bucket sent whole, PowerSGD's too.
fn sent_whole(mut schedule: Schedule) -> Schedule {
    if schedule.buckets.iter().any(|b| b.low_rank.is_some()) {
        schedule.buckets.to_mut().iter_mut().for_each(|b| b.low_rank = None);
    }
    schedule
}

/// Step `step`'s time in `breakdowns`: its slowest rank's.
fn step_time(breakdowns: &[StepBreakdown], step: u64) -> Option<u64> {
    breakdowns.iter().filter(|b| b.step == step).map(|b| b.step_ns).max()
}
