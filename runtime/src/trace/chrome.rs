//! Chrome trace-event files (Perfetto, chrome://tracing): one process per rank, a compute track
//! and a communication track, bucket ids, bytes on the wire and their format as arguments.

use std::io::Write;
use std::path::Path;

use overlap_plan::Schedule;
use serde_json::{json, Value};

use super::span::{Activity, RunInfo, Span};
use crate::error::{Error, Result};
use crate::process::atomic_write::write_atomically;

const COMPUTE_TRACK: u32 = 0;
const COMMUNICATION_TRACK: u32 = 1;
/// The host's batch fills: on a GPU they run beside the device's spans, which a track of
/// their own keeps from overlapping.
const DATA_TRACK: u32 = 2;

/// Writes `spans` (every rank's) to `path`, streaming one event at a time.
pub fn write_chrome_trace(path: &Path, spans: &[Span], info: &RunInfo) -> Result<()> {
    write_atomically(path, |out| write_events(out, spans, info), || {})
        .map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

fn write_events(out: &mut dyn Write, spans: &[Span], info: &RunInfo) -> std::io::Result<()> {
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
        for (tid, name) in [(COMPUTE_TRACK, "compute"), (COMMUNICATION_TRACK, "communication"), (DATA_TRACK, "data")] {
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
        Activity::Fill => ("fill batch".to_string(), "data", json!({})),
        Activity::Clip => ("clip grad norm".to_string(), "update", json!({})),
        Activity::Backward { layer: i } => (format!("{} backward", layer(i)), "backward", json!({"layer": layer(i)})),
        Activity::AllReduce { bucket, bytes, queued_ns, updates_ns } => {
            // `bytes` travelled (one rank's copy); the bucket's FP32 size and format say how many
            // fewer than FP32's.
            let planned = schedule.buckets.get(bucket as usize);
            (
                format!("all-reduce b{bucket}"),
                "all-reduce",
                json!({
                    "bucket": bucket,
                    "bytes": bytes,
                    "wire_format": planned.map(|b| b.wire.name()),
                    "powersgd_rank": planned.and_then(|b| b.low_rank).map(|l| l.rank),
                    "fp32_bytes": planned.map(|b| b.bytes()),
                    "queued_us": queued_ns as f64 / 1e3,
                    "waited_in_queue_us": span.start_ns.saturating_sub(queued_ns) as f64 / 1e3,
                    "lent_updates_us": updates_ns as f64 / 1e3,
                }),
            )
        }
        Activity::Wait { bucket } => (format!("wait b{bucket}"), "wait", json!({"bucket": bucket})),
        Activity::WaitAll => ("wait all buckets".to_string(), "wait", json!({})),
        Activity::AllGather { bucket, bytes, queued_ns } | Activity::ReduceScatter { bucket, bytes, queued_ns, .. } => {
            (
                match span.activity {
                    Activity::AllGather { .. } => format!("all-gather b{bucket}"),
                    _ => format!("reduce-scatter b{bucket}"),
                },
                if matches!(span.activity, Activity::AllGather { .. }) { "all-gather" } else { "reduce-scatter" },
                json!({
                    "bucket": bucket,
                    "bytes": bytes,
                    "queued_us": queued_ns as f64 / 1e3,
                    "waited_in_queue_us": span.start_ns.saturating_sub(queued_ns) as f64 / 1e3,
                }),
            )
        }
        Activity::WaitGather { bucket } => (format!("wait all-gather b{bucket}"), "wait", json!({"bucket": bucket})),
        Activity::Update { bucket } => (format!("update b{bucket}"), "optimizer", json!({"bucket": bucket})),
        Activity::Compress { bucket } => (format!("powersgd b{bucket}"), "compression", json!({"bucket": bucket})),
    };
    args["step"] = json!(span.step + 1);
    if let Activity::ReduceScatter { updates_ns, .. } = span.activity {
        args["lent_updates_us"] = json!(updates_ns as f64 / 1e3);
    }
    let tid = match span.activity {
        Activity::Fill => DATA_TRACK,
        a if a.is_communication() => COMMUNICATION_TRACK,
        _ => COMPUTE_TRACK,
    };
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

#[cfg(test)]
mod tests {
    use overlap_plan::{plan_buckets, BucketLimits, LayerSpec, Width, WireFormat};

    use super::*;

    #[test]
    fn an_all_reduce_names_its_bytes_on_the_wire_and_their_format() {
        let fc = LayerSpec::new("fc", "Linear", Width::Fixed { input: 4, output: 8 }).with_param("weight", &[8, 4]);
        let schedule = plan_buckets("M", &[fc], &BucketLimits::default()).unwrap().with_wire(WireFormat::Bf16);
        let activity = Activity::AllReduce { bucket: 0, bytes: 64, queued_ns: 1_000, updates_ns: 0 };
        let span = Span { rank: 1, step: 2, activity, start_ns: 3_000, end_ns: 5_000 };
        let args = &event(&span, &schedule)["args"];
        assert_eq!((args["bytes"].as_u64(), args["fp32_bytes"].as_u64()), (Some(64), Some(128)));
        assert_eq!(args["wire_format"], "bf16");
        assert_eq!((args["step"].as_u64(), args["waited_in_queue_us"].as_f64()), (Some(3), Some(2.0)));
    }
}
