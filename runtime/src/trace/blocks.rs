//! The timeline's blocks: one bar per span, with its name as a tooltip and as a label inside
//! the bar or, when the bar is too narrow, in a band beside its lane (`labels`).

use std::fmt::Write as _;

use overlap_plan::{human_bytes, Schedule};

use super::canvas::{escape, BACKWARD, BUCKETS, FORWARD, LANE, LEFT, LOSS, QUEUE_BAND, RIGHT, WAIT, WIDTH};
use super::labels::{self, Placement};
use super::span::{Activity, Span};

/// One span as drawn: fill, label, lane (0 compute, 1 communication) and horizontal extent.
pub(super) struct Block<'a> {
    span: &'a Span,
    fill: &'static str,
    label: String,
    pub(super) lane: usize,
    left: f64,
    width: f64,
}

/// The blocks of `rank`, in the order of `spans`.
pub(super) fn blocks<'a>(
    spans: &[&'a Span],
    rank: usize,
    schedule: &Schedule,
    x: &impl Fn(u64) -> f64,
) -> Vec<Block<'a>> {
    let of_rank = spans.iter().filter(|s| s.rank as usize == rank);
    of_rank
        .filter_map(|&span| {
            let (fill, label, lane) = style(span, schedule)?;
            let left = x(span.start_ns);
            Some(Block { span, fill, label, lane: lane as usize, left, width: (x(span.end_ns) - left).max(0.8) })
        })
        .collect()
}

/// Where the labels of `lane`'s blocks go, in the order of its blocks.
pub(super) fn lane_labels(blocks: &[Block], lane: usize) -> Vec<Placement> {
    let lane: Vec<(f64, f64, &str)> =
        blocks.iter().filter(|b| b.lane == lane).map(|b| (b.left, b.width, b.label.as_str())).collect();
    labels::place(&lane, LEFT, WIDTH - RIGHT)
}

/// One block on the row whose compute lane starts at `y`, with its tooltip and its label: inside,
/// or in the band beyond its lane's outer edge with a leader line to it.
pub(super) fn draw_block(svg: &mut String, b: &Block, placement: &Placement, y: f64, x: &impl Fn(u64) -> f64) {
    let (left, w) = (b.left, b.width);
    let top = y + b.lane as f64 * LANE + 2.0;
    let mut bar_height = LANE - 4.0;
    if let Activity::AllReduce { bucket, queued_ns, .. }
    | Activity::ReduceScatter { bucket, queued_ns, .. }
    | Activity::AllGather { bucket, queued_ns, .. } = b.span.activity
    {
        // Launched but not yet started: a dashed line under the bars, launch to start.
        bar_height = LANE - QUEUE_BAND;
        if queued_ns < b.span.start_ns {
            let (color, line_y) = (BUCKETS[bucket as usize % BUCKETS.len()], top + LANE - QUEUE_BAND + 1.5);
            let _ = writeln!(
                svg,
                r#"<line x1="{:.1}" x2="{left:.1}" y1="{line_y:.1}" y2="{line_y:.1}" stroke="{color}" stroke-width="2" stroke-dasharray="3,2"/>"#,
                x(queued_ns)
            );
        }
    }
    let (fill, label) = (b.fill, escape(&b.label));
    let _ = writeln!(
        svg,
        r#"<rect x="{left:.1}" y="{top:.1}" width="{w:.1}" height="{bar_height:.1}" fill="{fill}" stroke="white" stroke-width="0.5"><title>{label} — {:.2} ms</title></rect>"#,
        b.span.duration_ns() as f64 / 1e6
    );
    match *placement {
        Placement::Inside => {
            let text_fill = if fill == FORWARD || fill == LOSS { "black" } else { "white" };
            let _ = writeln!(
                svg,
                r#"<text class="block-label" x="{:.1}" y="{:.1}" fill="{text_fill}" text-anchor="middle">{label}</text>"#,
                left + w / 2.0,
                top + bar_height / 2.0 + 4.0
            );
        }
        Placement::Band { row, x: label_x } => {
            // Above the compute lane, below the communication lane; row 0 nearest.
            let step = row as f64 * labels::ROW_HEIGHT;
            let (edge, baseline, line_end) = if b.lane == 0 {
                (top, y - 3.0 - step, y - 1.0 - step)
            } else {
                (top + bar_height, y + 2.0 * LANE + 8.0 + step, y + 2.0 * LANE + step)
            };
            let _ = writeln!(
                svg,
                r##"<line x1="{:.1}" x2="{label_x:.1}" y1="{edge:.1}" y2="{line_end:.1}" stroke="#999" stroke-width="0.6"/>"##,
                left + w / 2.0
            );
            let _ = writeln!(
                svg,
                r##"<text class="block-label" x="{label_x:.1}" y="{baseline:.1}" font-size="{}" fill="#333" text-anchor="middle">{label}</text>"##,
                labels::BAND_FONT
            );
        }
        Placement::TooltipOnly => {}
    }
}

/// Fill, label and lane (0 compute, 1 communication) of a span; `None` for the step itself and
/// the host's batch fills.
fn style(s: &Span, schedule: &Schedule) -> Option<(&'static str, String, f64)> {
    let layer = |i: u32| schedule.layers.get(i as usize).map_or("?".to_string(), |l| l.name.to_string());
    let bucket_color = |b: u32| BUCKETS[b as usize % BUCKETS.len()];
    Some(match s.activity {
        Activity::Step => return None,
        Activity::Forward { layer: i } => (FORWARD, layer(i), 0.0),
        Activity::Loss => (LOSS, "loss".into(), 0.0),
        // Host work the trace shows: on a GPU it overlaps the device's spans in the compute lane.
        Activity::Fill => return None,
        Activity::Clip => (LOSS, "clip".into(), 0.0),
        Activity::Backward { layer: i } => (BACKWARD, layer(i), 0.0),
        Activity::Update { bucket } => (bucket_color(bucket), format!("upd b{bucket}"), 0.0),
        Activity::Compress { bucket } => (bucket_color(bucket), format!("psgd b{bucket}"), 0.0),
        Activity::Wait { bucket } => (WAIT, format!("wait b{bucket}"), 0.0),
        Activity::WaitAll => (WAIT, "wait (all buckets)".into(), 0.0),
        Activity::WaitGather { bucket } => (WAIT, format!("gather b{bucket}"), 0.0),
        Activity::AllGather { bucket, bytes, .. } => {
            (bucket_color(bucket), format!("ag b{bucket} {}", human_bytes(bytes as usize)), 1.0)
        }
        Activity::ReduceScatter { bucket, bytes, .. } => {
            (bucket_color(bucket), format!("rs b{bucket} {}", human_bytes(bytes as usize)), 1.0)
        }
        Activity::AllReduce { bucket, bytes, .. } => {
            (bucket_color(bucket), format!("b{bucket} {}", human_bytes(bytes as usize)), 1.0)
        }
    })
}
