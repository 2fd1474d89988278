//! Chrome trace-event files (Perfetto, chrome://tracing): one process per rank, a compute track
//! and a communication track, bucket ids and bytes as arguments.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use overlap_plan::Schedule;
use serde_json::{json, Value};

use super::span::{Activity, RunInfo, Span};
use crate::error::{Error, Result};

const COMPUTE_TRACK: u32 = 0;
const COMMUNICATION_TRACK: u32 = 1;

/// Writes `spans` (every rank's) to `path`, streaming one event at a time.
pub fn write_chrome_trace(path: &Path, spans: &[Span], info: &RunInfo) -> Result<()> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let mut out = BufWriter::new(File::create(path).map_err(io)?);
    write_events(&mut out, spans, info).map_err(io)?;
    out.flush().map_err(io)
}

fn write_events(out: &mut impl Write, spans: &[Span], info: &RunInfo) -> std::io::Result<()> {
    out.write_all(b"{\"traceEvents\":[\n")?;
    let mut first = true;
    let mut emit = |out: &mut dyn Write, event: Value| -> std::io::Result<()> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, &event).map_err(std::io::Error::other)
    };
    for rank in 0..info.world_size {
        emit(out, json!({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": format!("rank {rank}")}}))?;
        emit(out, json!({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}}))?;
        for (tid, name) in [(COMPUTE_TRACK, "compute"), (COMMUNICATION_TRACK, "communication")] {
            emit(out, json!({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": name}}))?;
        }
    }
    for span in spans {
        emit(out, event(span, info.schedule))?;
    }
    out.write_all(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    let other = json!({
        "model": info.schedule.model,
        "world_size": info.world_size,
        "mode": info.mode,
        "emulated_link": info.emulated_link,
        "schedule": info.schedule.to_string(),
    });
    serde_json::to_writer(&mut *out, &other).map_err(std::io::Error::other)?;
    out.write_all(b"}\n")
}

/// One complete (`"ph": "X"`) event; times in microseconds as the format wants.
fn event(span: &Span, schedule: &Schedule) -> Value {
    let layer = |i: u32| schedule.layers.get(i as usize).map_or("?", |l| &l.name).to_string();
    let (name, category, mut args) = match span.activity {
        Activity::Step => (format!("step {}", span.step + 1), "step", json!({})),
        Activity::Forward { layer: i } => (format!("{} forward", layer(i)), "forward", json!({"layer": layer(i)})),
        Activity::Loss => ("loss".to_string(), "loss", json!({})),
        Activity::Backward { layer: i } => (format!("{} backward", layer(i)), "backward", json!({"layer": layer(i)})),
        Activity::AllReduce { bucket, bytes, queued_ns } => (
            format!("all-reduce b{bucket}"),
            "all-reduce",
            json!({
                "bucket": bucket,
                "bytes": bytes,
                "queued_us": queued_ns as f64 / 1e3,
                "waited_in_queue_us": span.start_ns.saturating_sub(queued_ns) as f64 / 1e3,
            }),
        ),
        Activity::Wait { bucket } => (format!("wait b{bucket}"), "wait", json!({"bucket": bucket})),
        Activity::WaitAll => ("wait all buckets".to_string(), "wait", json!({})),
        Activity::Update { bucket } => (format!("update b{bucket}"), "optimizer", json!({"bucket": bucket})),
    };
    args["step"] = json!(span.step + 1);
    let tid = if span.activity.is_communication() { COMMUNICATION_TRACK } else { COMPUTE_TRACK };
    json!({
        "name": name,
        "cat": category,
        "ph": "X",
        "ts": span.start_ns as f64 / 1e3,
        "dur": span.duration_ns() as f64 / 1e3,
        "pid": span.rank,
        "tid": tid,
        "args": args,
    })
}
