//! The report's row for each bucket: its bytes and format on the wire, where it was launched, its
//! all-reduce's time (the lent updates' part of it apart) and bus bandwidth, and its exposed time.

use overlap_plan::{Link, Schedule};
use serde::Serialize;

use super::breakdown::{BucketTiming, StepBreakdown};
use super::stats::{median, median_of_rank_means};
use crate::comm::CommMode;

/// One bucket, medians over the steps of the ranks' means.
#[derive(Clone, Debug, Serialize)]
pub struct BucketReport {
    /// The bucket's index, in launch order.
    pub bucket: usize,
    /// Its FP32 gradients.
    pub bytes: usize,
    /// The format they travelled in, and one rank's bytes on the wire in it.
    pub wire_format: String,
    /// One rank's bytes on the wire per step, as measured (the schedule's count when nothing was
    /// recorded).
    pub wire_bytes: usize,
    /// `<layer>.backward`, the call after which it was launched, or `all of backward` without
    /// overlap.
    pub launched_after: String,
    /// Its collectives' time on the communication thread, lent updates included, in milliseconds.
    pub all_reduce_ms: f64,
    /// Of `all_reduce_ms`, the updates of the parameters lent with the bucket, run on the
    /// communication thread as the sums arrived.
    pub lent_updates_ms: f64,
    /// nccl-tests' bus bandwidth of what travelled: `wire_bytes / t * 2(n-1)/n`, in GB/s (10^9
    /// bytes), `t` the all-reduce's time less the lent updates', as nccl-tests times the transfer;
    /// for a sharded bucket, the mean of its reduce-scatter's and its all-gather's bytes in place
    /// of `wire_bytes`.
    pub bus_bandwidth_gb_s: f64,
    /// The wait points' blocked time while it was on the wire, in milliseconds.
    pub exposed_ms: f64,
}

/// A row per bucket of `schedule`, from `steps` (each one step's breakdowns, a rank's each).
pub(super) fn bucket_reports(
    steps: &[&[StepBreakdown]],
    schedule: &Schedule,
    world_size: usize,
    mode: CommMode,
    link: Option<Link>,
) -> Vec<BucketReport> {
    let n = world_size as f64;
    (0..schedule.buckets.len())
        .map(|k| {
            let steps = phase_steps(steps, schedule, k);
            let mean = |f: &dyn Fn(&StepBreakdown) -> u64| median_of_rank_means(&steps, f);
            let all_reduce_ms = mean(&|b| b.buckets.get(k).map_or(0, |t| t.all_reduce_ns));
            let lent_updates_ms = mean(&|b| b.buckets.get(k).map_or(0, |t| t.updates_ns));
            let wire_bytes = wire_bytes(&steps, schedule, k);
            // A sharded bucket's two halves move the reduce-scatter's bytes (in the wire format)
            // and the all-gather's (FP32) once each: as one all-reduce, their mean.
            let gathered = measured_bytes(&steps, k, |t| t.gathered_bytes);
            let moved = if gathered > 0.0 { (wire_bytes as f64 + gathered) / 2.0 } else { wire_bytes as f64 };
            // The transfer's time: the all-reduce's less the lent updates the thread ran between
            // chunks, but no less than an emulated link holds it (the updates then ran within the
            // modelled time).
            let modelled_ms = link
                .filter(|_| world_size > 1)
                .map_or(0.0, |l| l.ring_all_reduce_seconds(moved as usize, world_size) * 1e3);
            let transfer_ms = (all_reduce_ms - lent_updates_ms).max(modelled_ms.min(all_reduce_ms));
            BucketReport {
                bucket: k,
                bytes: schedule.buckets[k].bytes(),
                wire_format: match schedule.buckets[k].low_rank {
                    Some(l) => format!("rank {}", l.rank),
                    None => schedule.buckets[k].wire.to_string(),
                },
                wire_bytes,
                launched_after: match mode {
                    // Without overlap every bucket waits for the whole backward.
                    CommMode::AfterBackward => "all of backward".to_string(),
                    _ => format!("{}.backward", schedule.layers[schedule.buckets[k].launch_after].name),
                },
                all_reduce_ms,
                lent_updates_ms,
                bus_bandwidth_gb_s: if transfer_ms > 0.0 {
                    moved / (transfer_ms / 1e3) * 2.0 * (n - 1.0) / n / 1e9
                } else {
                    0.0
                },
                exposed_ms: mean(&|b| b.buckets.get(k).map_or(0, |t| t.exposed_ns)),
            }
        })
        .collect()
}

/// The steps bucket `k`'s row is taken over. PowerSGD sends its buckets whole for `start_iter`
/// steps first: the row is over the compressed steps where there are any, so that its bytes and
/// times are one phase's, not medians between the two (a busbw from the one's bytes and the
/// other's time).
fn phase_steps<'s>(steps: &[&'s [StepBreakdown]], schedule: &Schedule, k: usize) -> Vec<&'s [StepBreakdown]> {
    let from = schedule.buckets[k].low_rank.map_or(0, |l| l.start_iter);
    let phase = if steps.iter().any(|s| s[0].step >= from) { from } else { 0 };
    steps.iter().copied().filter(|s| s[0].step >= phase).collect()
}

/// What bucket `k` put on the wire over `steps`, as measured; the schedule's count when nothing
/// was recorded.
fn wire_bytes(steps: &[&[StepBreakdown]], schedule: &Schedule, k: usize) -> usize {
    let measured = measured_bytes(steps, k, |t| t.bytes);
    if measured > 0.0 {
        measured as usize
    } else {
        schedule.wire_bytes(k)
    }
}

/// Bucket `k`'s bytes of one kind over `steps`: per step the largest of the ranks', their median.
fn measured_bytes(steps: &[&[StepBreakdown]], k: usize, bytes: impl Fn(&BucketTiming) -> u64) -> f64 {
    median(steps.iter().map(|s| s.iter().map(|b| b.buckets.get(k).map_or(0, &bytes)).max().unwrap_or(0) as f64))
}
