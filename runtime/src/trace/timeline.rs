//! A picture of one representative step: a row per rank with a compute lane and a communication
//! lane, buckets coloured and labelled, exposed waits in red. Plain SVG, readable in a browser.

use std::fmt::Write as _;
use std::path::Path;

use overlap_plan::{human_bytes, Schedule};

use super::blocks::{blocks, draw_block, lane_labels, Block};
use super::breakdown::{keep_compressed, StepBreakdown};
use super::canvas::{escape, BACKWARD, BUCKETS, FORWARD, LANE, LEFT, LOSS, RIGHT, WAIT, WIDTH};
use super::labels::{self, Placement};
use super::span::{Activity, RunInfo, Span};
use super::stats::median;
use crate::error::{Error, Result};
use crate::process::atomic_write::write_atomically;

const TOP: f64 = 92.0;
const ROW_GAP: f64 = 22.0;
const LEGEND_LINE: f64 = 20.0;

/// The step whose time (slowest rank) is the median of `breakdowns`' steps; the run's first,
/// `warm_up`, is skipped when there are others (it warms caches and allocators). Where PowerSGD
/// compressed some steps, only those, as the report reads them (the steps before its start sent
/// whole).
pub fn representative_step(breakdowns: &[StepBreakdown], warm_up: u64) -> Option<u64> {
    let mut by_step: Vec<&[StepBreakdown]> = breakdowns.chunk_by(|a, b| a.step == b.step).collect();
    keep_compressed(&mut by_step);
    let mut steps: Vec<(u64, u64)> =
        by_step.iter().map(|s| (s[0].step, s.iter().map(|b| b.step_ns).max().unwrap_or(0))).collect();
    if steps.len() > 1 {
        steps.retain(|&(step, _)| step != warm_up);
    }
    let target = median(steps.iter().map(|&(_, ns)| ns as f64));
    steps.iter().min_by(|a, b| (a.1 as f64 - target).abs().total_cmp(&(b.1 as f64 - target).abs())).map(|s| s.0)
}

/// Writes the SVG timeline of `step` (see `render`) to `path`, replacing any file there whole or
/// not at all.
pub fn write_timeline(path: &Path, spans: &[Span], step: u64, info: &RunInfo) -> Result<()> {
    let svg = render(spans, step, info);
    write_atomically(path, |out| out.write_all(svg.as_bytes()), || {})
        .map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

/// The SVG document for `step`.
pub fn render(spans: &[Span], step: u64, info: &RunInfo) -> String {
    let spans: Vec<&Span> = spans.iter().filter(|s| s.step == step).collect();
    let steps: Vec<&&Span> = spans.iter().filter(|s| s.activity == Activity::Step).collect();
    let t0 = steps.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let t1 = steps.iter().map(|s| s.end_ns).max().unwrap_or(t0 + 1).max(t0 + 1);
    // As the report counts the step: not the all-gathers no step waits for (a sharded run's last
    // ones, tagged with its last step but waited for after it, beyond the picture), and nothing
    // past its end.
    let clipped: Vec<Span> = spans
        .iter()
        .filter(|s| s.start_ns < t1 && !s.gathered_after(t1))
        .map(|s| Span { end_ns: s.end_ns.min(t1), ..**s })
        .collect();
    let spans: Vec<&Span> = clipped.iter().collect();
    let ms = |ns: u64| (ns as f64 - t0 as f64) / 1e6;
    let scale = (WIDTH - LEFT - RIGHT) / ms(t1);
    let x = |ns: u64| LEFT + ms(ns).max(0.0) * scale;
    let rows = info.world_size.max(1);
    // Each rank's blocks and their labels' places first: the label bands take room in the layout.
    let ranks: Vec<Vec<Block>> = (0..rows).map(|rank| blocks(&spans, rank, info.schedule, &x)).collect();
    let placements: Vec<[Vec<Placement>; 2]> = ranks.iter().map(|b| [0, 1].map(|lane| lane_labels(b, lane))).collect();
    let band = |p: &[Placement]| labels::rows_used(p) as f64 * labels::ROW_HEIGHT;
    let mut rank_y = Vec::with_capacity(rows);
    let mut y = TOP;
    for [compute, comm] in &placements {
        rank_y.push(y + band(compute));
        y += band(compute) + 2.0 * LANE + band(comm) + ROW_GAP;
    }
    let legend_y = y + 28.0;
    let legend_lines = legend_lines(info.schedule);
    let height = legend_y + (legend_lines as f64 + 1.0) * LEGEND_LINE + 8.0;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let exposed: u64 = spans.iter().filter(|s| s.activity.is_wait()).map(|s| s.duration_ns()).sum();
    let reduced: u64 = spans.iter().filter(|s| s.activity.is_communication()).map(|s| s.duration_ns()).sum();
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{} — step {}, {} rank(s), {}: {:.1} ms</text>"#,
        escape(&info.schedule.model),
        step + 1,
        info.world_size,
        info.mode,
        ms(t1)
    );
    let per_rank = rows as f64;
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="40">per rank: all-reduce {:.1} ms, exposed (red: compute blocked in a wait point) {:.1} ms{}</text>"#,
        reduced as f64 / 1e6 / per_rank,
        exposed as f64 / 1e6 / per_rank,
        if reduced > 0 {
            // This step's: the report gives the median over steps, which may differ.
            format!(", hidden {:.0}% in this step", (100.0 * (1.0 - exposed as f64 / reduced as f64)).max(0.0))
        } else {
            String::new()
        }
    );
    if let Some(link) = &info.emulated_link {
        let _ = writeln!(
            svg,
            r#"<text x="{LEFT}" y="58" fill="{WAIT}" font-weight="bold">EMULATED LINK: {} — each all-reduce held until the ring cost model says it would finish</text>"#,
            escape(link)
        );
    }
    axis(&mut svg, ms(t1), scale, TOP - 8.0, legend_y - 30.0);

    for (rank, (blocks, placements)) in ranks.iter().zip(&placements).enumerate() {
        let y = rank_y[rank];
        let _ = writeln!(svg, r#"<text x="8" y="{:.1}" font-weight="bold">rank {rank}</text>"#, y + LANE * 0.65);
        let _ = writeln!(svg, r##"<text x="58" y="{:.1}" fill="#555">compute</text>"##, y + LANE * 0.65);
        let _ = writeln!(svg, r##"<text x="58" y="{:.1}" fill="#555">comm</text>"##, y + LANE * 1.65);
        for lane in 0..2 {
            let _ = writeln!(
                svg,
                r##"<rect x="{LEFT}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#f4f4f4"/>"##,
                y + lane as f64 * LANE + 1.0,
                WIDTH - LEFT - RIGHT,
                LANE - 2.0
            );
        }
        let mut next = [0, 0];
        for b in blocks {
            let placement = &placements[b.lane][next[b.lane]];
            next[b.lane] += 1;
            draw_block(&mut svg, b, placement, y, &x);
        }
    }
    legend(&mut svg, info.schedule, legend_y);
    svg.push_str("</svg>\n");
    svg
}

/// Millisecond ticks at 1, 2 or 5 times a power of ten, about ten of them.
fn axis(svg: &mut String, total_ms: f64, scale: f64, top: f64, bottom: f64) {
    let raw = (total_ms / 10.0).max(1e-3);
    let magnitude = 10f64.powf(raw.log10().floor());
    let tick = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|t| *t >= raw).unwrap_or(10.0 * magnitude);
    let mut t = 0.0;
    while t <= total_ms + 1e-9 {
        let x = LEFT + t * scale;
        let _ = writeln!(svg, r##"<line x1="{x:.1}" x2="{x:.1}" y1="{top:.1}" y2="{bottom:.1}" stroke="#ddd"/>"##);
        // As many decimals as the tick needs, so that no two labels read alike (0.05 ms ticks).
        let decimals = (-tick.log10()).ceil().max(0.0) as usize;
        let _ = writeln!(
            svg,
            r##"<text x="{x:.1}" y="{:.1}" fill="#555" text-anchor="middle">{t:.decimals$} ms</text>"##,
            top - 4.0
        );
        t += tick;
    }
}

/// Legend entries: a colour and what it means.
fn legend_items(schedule: &Schedule) -> Vec<(&'static str, String)> {
    let mut items: Vec<(&str, String)> = vec![
        (FORWARD, "forward".into()),
        (BACKWARD, "backward".into()),
        (LOSS, "loss".into()),
        (WAIT, "exposed wait".into()),
    ];
    for (k, b) in schedule.buckets.iter().enumerate() {
        items.push((BUCKETS[k % BUCKETS.len()], format!("b{k}: all-reduce / update ({})", human_bytes(b.bytes()))));
    }
    items
}

fn legend_width(label: &str) -> f64 {
    16.0 + label.len() as f64 * 6.3 + 18.0
}

/// How many lines the legend's entries wrap onto.
fn legend_lines(schedule: &Schedule) -> usize {
    let (mut x, mut lines) = (LEFT, 1);
    for (_, label) in legend_items(schedule) {
        if x + legend_width(&label) > WIDTH - RIGHT {
            (x, lines) = (LEFT, lines + 1);
        }
        x += legend_width(&label);
    }
    lines
}

fn legend(svg: &mut String, schedule: &Schedule, y: f64) {
    let items = legend_items(schedule);
    let (mut x, mut y) = (LEFT, y);
    for (color, label) in items {
        let w = legend_width(&label);
        if x + w > WIDTH - RIGHT {
            (x, y) = (LEFT, y + LEGEND_LINE);
        }
        let _ = writeln!(svg, r#"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{color}"/>"#, y - 10.0);
        let _ = writeln!(svg, r#"<text x="{:.1}" y="{y:.1}">{}</text>"#, x + 16.0, escape(&label));
        x += w;
    }
    let _ = writeln!(
        svg,
        r##"<text x="{LEFT}" y="{:.1}" fill="#555">dashed: bucket launched by backward, queued behind earlier all-reduces</text>"##,
        y + LEGEND_LINE
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(rank: u32, step: u64, activity: Activity, start_ms: u64, end_ms: u64) -> Span {
        Span { rank, step, activity, start_ns: start_ms * 1_000_000, end_ns: end_ms * 1_000_000 }
    }

    #[test]
    fn picks_the_median_step_and_draws_every_lane() {
        let mut spans = vec![];
        for (step, length) in [(0, 90), (1, 40), (2, 50), (3, 60)] {
            let t = step * 100;
            for rank in 0..2 {
                spans.push(span(rank, step, Activity::Step, t, t + length));
                spans.push(span(rank, step, Activity::Backward { layer: 0 }, t, t + 20));
                spans.push(span(
                    rank,
                    step,
                    Activity::AllReduce { bucket: 0, bytes: 1024, queued_ns: t * 1_000_000, updates_ns: 0 },
                    t + 5,
                    t + 30,
                ));
                spans.push(span(rank, step, Activity::Wait { bucket: 0 }, t + 20, t + 30));
            }
        }
        let b = crate::trace::breakdown::breakdowns(&spans, 1, 1);
        assert_eq!(representative_step(&b, 0), Some(2), "median of 40, 50, 60; the warm-up step is skipped");
        // A resumed run's first step is its warm-up, not step 0: with step 2 first, 90, 40 and 60.
        assert_eq!(representative_step(&b, 2), Some(3), "the median of 90, 40 and 60");
        let schedule = empty_schedule();
        let info = RunInfo { schedule: &schedule, world_size: 2, mode: "overlap", emulated_link: None };
        let svg = render(&spans, 2, &info);
        assert!(svg.contains("M — step 3, 2 rank(s), overlap: 50.0 ms"), "{svg}");
        assert_eq!(svg.matches("<title>wait b0").count(), 2, "one exposed wait per rank");
        assert_eq!(svg.matches("<title>b0 1.0 KiB").count(), 2, "one all-reduce per rank");
        assert_eq!(svg.matches("stroke-dasharray").count(), 2, "queued time before each all-reduce");
        assert!(!svg.contains("EMULATED"));
        assert!(svg.contains("hidden 60%"), "10 of 25 ms exposed");
    }

    #[test]
    fn where_powersgd_compressed_steps_the_median_is_of_those() {
        // Steps 0..6 sent whole in 80 ms, steps 6..9 compressed in 95, 100 and 105 ms.
        let mut spans = vec![];
        for step in 0..9u64 {
            let t = step * 200;
            let length = if step < 6 { 80 } else { 95 + 5 * (step - 6) };
            spans.push(span(0, step, Activity::Step, t, t + length));
            if step >= 6 {
                spans.push(span(0, step, Activity::Compress { bucket: 0 }, t, t + 3));
            }
        }
        let b = crate::trace::breakdown::breakdowns(&spans, 1, 1);
        assert_eq!(representative_step(&b, 0), Some(7), "the compressed steps' median, as the report reads them");
        assert_eq!(representative_step(&b[..6], 0), Some(1), "none compressed: every step but the warm-up");
    }

    #[test]
    fn what_runs_past_the_step_is_neither_drawn_nor_counted() {
        // A sharded run's last all-gather, tagged with its last step but waited for after it.
        let gather = Activity::AllGather { bucket: 0, bytes: 1 << 20, queued_ns: 0 };
        let spans = vec![
            span(0, 0, Activity::Step, 0, 40),
            span(0, 0, Activity::Backward { layer: 0 }, 0, 20),
            span(0, 0, Activity::AllReduce { bucket: 0, bytes: 1024, queued_ns: 0, updates_ns: 0 }, 20, 30),
            span(0, 0, gather, 35, 70),
            span(0, 0, Activity::AllGather { bucket: 1, bytes: 1 << 20, queued_ns: 0 }, 45, 60),
        ];
        let schedule = empty_schedule();
        let info = RunInfo { schedule: &schedule, world_size: 1, mode: "overlap", emulated_link: None };
        let svg = render(&spans, 0, &info);
        assert!(
            svg.contains("per rank: all-reduce 10.0 ms"),
            "the all-reduce alone: the gathers no step waits for are no part of it: {svg}"
        );
        for rect in svg.lines().filter(|l| l.starts_with("<rect x=")) {
            let number = |name: &str| -> f64 {
                let at = rect.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
                rect[at..].split('"').next().unwrap().parse().unwrap()
            };
            assert!(number("x") + number("width") <= WIDTH - RIGHT + 0.1, "drawn past the step: {rect}");
        }
    }

    /// A model `M` with no layers: the spans alone say what is drawn.
    fn empty_schedule() -> overlap_plan::Schedule {
        overlap_plan::Schedule {
            model: "M".into(),
            limits: overlap_plan::BucketLimits::Unlimited,
            layers: std::borrow::Cow::Borrowed(&[]),
            buckets: std::borrow::Cow::Borrowed(&[]),
            shard_optimizer: false,
            gathers: std::borrow::Cow::Borrowed(&[]),
        }
    }

    /// Each block label of `svg`: its text and box (left, top, right, bottom).
    fn block_labels(svg: &str) -> Vec<(String, [f64; 4])> {
        let attr = |line: &str, name: &str| -> Option<f64> {
            let at = line.find(&format!(" {name}=\""))? + name.len() + 3;
            line[at..].split('"').next()?.parse().ok()
        };
        svg.lines()
            .filter(|l| l.starts_with(r#"<text class="block-label""#))
            .map(|l| {
                let text = l.split('>').nth(1).unwrap().trim_end_matches("</text").to_string();
                let (x, y, size) = (attr(l, "x").unwrap(), attr(l, "y").unwrap(), attr(l, "font-size").unwrap_or(11.0));
                let w = labels::text_width(&text, size);
                (text, [x - w / 2.0, y - size, x + w / 2.0, y])
            })
            .collect()
    }

    #[test]
    fn narrow_blocks_are_named_beside_their_lane_without_overlap() {
        let us = |t: f64| (t * 1000.0) as u64;
        let span = |activity, start_ms: f64, end_ms: f64| Span {
            rank: 0,
            step: 0,
            activity,
            start_ns: us(start_ms),
            end_ns: us(end_ms),
        };
        let mut spans = vec![
            span(Activity::Step, 0.0, 50_000.0),
            span(Activity::Loss, 0.0, 20_000.0),
            span(Activity::AllReduce { bucket: 2, bytes: 4096, queued_ns: 0, updates_ns: 0 }, 30_000.0, 30_001.0),
            span(Activity::Wait { bucket: 5 }, 49_999.0, 50_000.0),
        ];
        // Four updates of a microsecond each, side by side: far too narrow for any text.
        spans.extend((0..4).map(|b| span(Activity::Update { bucket: b }, 25_000.0 + b as f64, 25_001.0 + b as f64)));
        let schedule = empty_schedule();
        let info = RunInfo { schedule: &schedule, world_size: 1, mode: "overlap", emulated_link: None };
        let svg = render(&spans, 0, &info);
        let labels = block_labels(&svg);
        for name in ["loss", "b2 4.0 KiB", "wait b5", "upd b0", "upd b1", "upd b2", "upd b3"] {
            assert!(svg.contains(&format!("<title>{name} — ")), "{name}: no tooltip");
            assert_eq!(labels.iter().filter(|(t, _)| t == name).count(), 1, "{name}: one visible label");
        }
        for (k, (a, [l1, t1, r1, b1])) in labels.iter().enumerate() {
            // The SVG gives positions to a tenth of a pixel.
            assert!(*l1 >= LEFT - 0.1 && *r1 <= WIDTH - RIGHT + 0.1, "{a} leaves the lanes");
            for (b, [l2, t2, r2, b2]) in &labels[k + 1..] {
                assert!(r1 <= l2 || r2 <= l1 || b1 <= t2 || b2 <= t1, "{a} and {b} overlap");
            }
        }
    }

    #[test]
    fn tick_labels_never_repeat_on_a_fast_step() {
        for total_ms in [0.37, 0.5, 2.4, 37.0, 420.0] {
            let mut svg = String::new();
            axis(&mut svg, total_ms, 1000.0 / total_ms, 10.0, 100.0);
            let labels: Vec<&str> =
                svg.lines().filter_map(|l| l.split('>').nth(1)?.strip_suffix(" ms</text")).collect();
            let unique: std::collections::BTreeSet<&str> = labels.iter().copied().collect();
            assert!(labels.len() >= 3 && unique.len() == labels.len(), "{total_ms} ms: {labels:?}");
        }
    }
}
