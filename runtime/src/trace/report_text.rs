//! The overlap report as people read it: the step's time by part, what was hidden, the
//! simulator's prediction, memory, and one line per bucket (`--report text`, the default). The
//! figures themselves, and their JSON, are in `report`.

use std::fmt;

use overlap_plan::human_bytes;

use super::report::{AfterPause, OverlapReport};
use crate::comm::CommMode;

/// The heading of the bucket table's column of what travelled, in runs that narrow it.
const WIRE_HEADER: &str = "on the wire";

impl fmt::Display for OverlapReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "overlap report: {}, {} rank(s), {}{}, steps {}..={} ({} step{}{}; each row its own median over steps of \
             the mean over ranks, the step of its slowest rank, so rows need not add up)",
            self.model,
            self.world_size,
            self.mode,
            self.transport.map(|t| format!(" over {t}")).unwrap_or_default(),
            self.first_step,
            self.last_step,
            self.steps,
            if self.steps == 1 { "" } else { "s" },
            match self.sampled_every {
                1 => String::new(),
                n => format!(", one in {n} of the run's"),
            },
        )?;
        if let Some(link) = &self.emulated_link {
            writeln!(
                f,
                "EMULATED LINK: {link} (ring cost model; each all-reduce is held until it would have finished)"
            )?;
        }
        match self.after_pause {
            Some(AfterPause::LeftOut(n)) => writeln!(
                f,
                "  left out: {n} step{} that began after a pause (report, validation, checkpoint) in which \
                 {} all-gathers ran",
                if n == 1 { "" } else { "s" },
                if n == 1 { "its" } else { "their" }
            )?,
            Some(AfterPause::Kept { paused: 1, of: 1 }) => writeln!(
                f,
                "  this step began after a pause (report, validation, checkpoint) in which its all-gathers ran: \
                 they read as hidden, the step as short"
            )?,
            Some(AfterPause::Kept { paused, of }) => writeln!(
                f,
                "  {paused} of these {of} steps began after a pause (report, validation, checkpoint) in which \
                 their all-gathers ran: they read as hidden, the step as short"
            )?,
            None => {}
        }
        if self.sent_whole_left_out > 0 {
            let n = self.sent_whole_left_out;
            writeln!(
                f,
                "  left out: {n} step{} that PowerSGD sent whole, before its `start_iter`: every row is of the \
                 steps that sent its factors",
                if n == 1 { "" } else { "s" },
            )?;
        }
        let line = |f: &mut fmt::Formatter<'_>, name: &str, ms: f64, note: &str| {
            writeln!(f, "{}", format!("  {name:<12}{ms:>9.2} ms  {note}").trim_end())
        };
        line(
            f,
            "step",
            self.step_ms,
            &format!(
                "lower bound max(compute, all-reduce) of the slowest rank = {:.2} ms; step is {:.1}% above it",
                self.lower_bound_ms,
                self.above_lower_bound * 100.0
            ),
        )?;
        line(f, "forward", self.forward_ms, "")?;
        line(f, "loss", self.loss_ms, "")?;
        line(f, "backward", self.backward_ms, "")?;
        line(f, "optimizer", self.optimizer_ms, "updates after the wait points (lent ones run in the all-reduce)")?;
        if self.compression_ms > 0.0 {
            line(
                f,
                "powersgd",
                self.compression_ms,
                "error feedback, factors and decompression on the compute thread",
            )?;
            line(f, "compute", self.compute_ms, "forward + loss + backward + optimizer + powersgd")?;
        } else {
            line(f, "compute", self.compute_ms, "forward + loss + backward + optimizer")?;
        }
        line(f, "all-reduce", self.all_reduce_ms, "sum over buckets, and lent updates, on the communication thread")?;
        line(f, "exposed", self.exposed_ms, "compute thread blocked in wait points")?;
        line(f, "other", self.other_ms, "step - compute - exposed, per rank: data loading, bookkeeping")?;
        line(
            f,
            "data",
            self.data_ms,
            "the host filling batches, the next step's while this one's sums and updates run",
        )?;
        match self.hidden_fraction {
            Some(h) => line(
                f,
                "hidden",
                self.hidden_ms,
                &format!("{:.1}% of the all-reduce time (1 - exposed / all-reduce)", h * 100.0),
            )?,
            None if self.mode == CommMode::Skip.name() => writeln!(f, "  {}: nothing is all-reduced", self.mode)?,
            None if self.world_size > 1 => writeln!(f, "  nothing to all-reduce")?,
            None => writeln!(f, "  one rank: nothing to all-reduce")?,
        }
        if let Some(g) = &self.all_gather {
            line(
                f,
                "all-gather",
                g.all_gather_ms,
                &format!(
                    "sharded state, in forward: {:.2} ms waited there, {:.1}% hidden (included above)",
                    g.waited_ms,
                    g.hidden_fraction * 100.0
                ),
            )?;
        }
        if let Some(p) = &self.predicted {
            writeln!(
                f,
                "  simulator, from this run's layer times and link: step {:.2} ms ({:+.1}% off), all-reduce {:.2} ms, exposed {:.2} ms",
                p.step_ms,
                (p.step_ms / self.step_ms - 1.0) * 100.0,
                p.all_reduce_ms,
                p.exposed_ms
            )?;
            if p.all_gather_ms > 0.0 {
                writeln!(
                    f,
                    "  simulator, all-gathers in forward: {:.2} ms, {:.2} ms waited there",
                    p.all_gather_ms, p.gather_exposed_ms
                )?;
            }
        }
        if let Some(m) = &self.memory {
            let peak = m.peak_rss_mib.iter().copied().fold(0.0, f64::max);
            let (held, note) = if m.communication_only {
                ("gradient buckets", " (communication only: no parameters, optimizer state or activations)")
            } else {
                ("parameters, gradients, optimizer state and activations", "")
            };
            writeln!(
                f,
                "  memory: peak RSS {:.1} MiB (largest rank) for {:.1} MiB of {held}: {:.2}x{note}",
                peak,
                m.needed_mib,
                peak / m.needed_mib.max(f64::MIN_POSITIVE)
            )?;
            if !m.communication_only {
                let sharded = match m.optimizer_shards {
                    1 => "whole on every rank".to_string(),
                    n => format!("sharded over {n} ranks"),
                };
                writeln!(f, "  optimizer state: {:.2} MiB per rank, {sharded}", m.optimizer_state_mib)?;
                writeln!(
                    f,
                    "  activations: {:.2} MiB per rank: each layer's output and saved state, backward's gradient \
                     buffers",
                    m.activations_mib
                )?;
            }
        }
        // Compute-only sends nothing and never meets: no bucket table, no rank waits for another.
        let compute_only = self.mode == CommMode::Skip.name();
        if self.world_size > 1 && !compute_only {
            // FP32 runs keep their table; narrow ones say what travelled.
            let narrow = self.buckets.iter().any(|b| b.wire_bytes != b.bytes);
            if narrow {
                let (sent, full) = self.buckets.iter().fold((0, 0), |(s, t), b| (s + b.wire_bytes, t + b.bytes));
                let how = if self.buckets.iter().any(|b| b.wire_format.starts_with("rank")) {
                    "PowerSGD's factors, median step"
                } else {
                    "summed in FP32"
                };
                writeln!(
                    f,
                    "  on the wire: {} per rank for {} of FP32 gradients, {:.2}x fewer bytes ({how})",
                    human_bytes(sent),
                    human_bytes(full),
                    full as f64 / sent.max(1) as f64
                )?;
            }
            // The wire column is as wide as its widest cell, two spaces apart from the bytes.
            let wire_cells: Vec<String> =
                self.buckets.iter().map(|b| format!("{} {}", b.wire_format, human_bytes(b.wire_bytes))).collect();
            let wire_width = wire_cells.iter().map(String::len).chain([WIRE_HEADER.len()]).max().unwrap_or(0) + 2;
            let wire_header = if narrow { format!("{WIRE_HEADER:>wire_width$}") } else { String::new() };
            // So is the layer column, a space past its longest name (`h.11.attend.attn.backward`).
            let launch_width = self.buckets.iter().map(|b| b.launched_after.len() + 1).chain([18]).max().unwrap_or(18);
            writeln!(
                f,
                "  bucket        bytes{wire_header}  {:<launch_width$}  all-reduce        busbw     exposed",
                "launched after"
            )?;
            for (b, cell) in self.buckets.iter().zip(&wire_cells) {
                let wire = if narrow { format!("{cell:>wire_width$}") } else { String::new() };
                writeln!(
                    f,
                    "  b{:<5}{:>13}{wire}  {:<launch_width$}{:>9.2} ms{:>8} GB/s{:>9.2} ms",
                    b.bucket,
                    human_bytes(b.bytes),
                    b.launched_after,
                    b.all_reduce_ms,
                    crate::figures::three_digits(b.bus_bandwidth_gb_s),
                    b.exposed_ms
                )?;
            }
            let slowest: Vec<String> = self
                .ranks
                .iter()
                .filter(|r| r.slowest_in_steps > 0)
                .map(|r| format!("rank {} in {} step(s) (compute {:.2} ms)", r.rank, r.slowest_in_steps, r.compute_ms))
                .collect();
            if !slowest.is_empty() {
                writeln!(
                    f,
                    "  slowest rank: {}; median gap to the fastest {:.2} ms, which the others spend waiting",
                    slowest.join(", "),
                    self.straggler_gap_ms
                )?;
            }
        }
        Ok(())
    }
}
