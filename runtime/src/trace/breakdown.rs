//! Where one rank's step went: its spans summed by kind, and the time blocked in wait points
//! attributed to the buckets that were on the wire meanwhile.

use super::span::{Activity, Span};

/// One rank's step, in nanoseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepBreakdown {
    /// The step, counted from 0 as its spans are tagged.
    pub step: u64,
    /// The rank that ran it.
    pub rank: u32,
    /// The `Step` span: the whole step.
    pub step_ns: u64,
    /// Every layer's forward, summed over micro-steps.
    pub forward_ns: u64,
    /// The loss and its gradient, summed over micro-steps.
    pub loss_ns: u64,
    /// Every layer's backward, summed over micro-steps.
    pub backward_ns: u64,
    /// The optimizer updates on the compute thread, the clip's global norm included.
    pub update_ns: u64,
    /// PowerSGD's compression work on the compute thread.
    pub compress_ns: u64,
    /// Sum of the buckets' all-reduce times on the communication thread.
    pub all_reduce_ns: u64,
    /// Time the compute thread was blocked in wait points.
    pub exposed_ns: u64,
    /// The host filling batches (the next step's among them).
    pub fill_ns: u64,
    /// Of these: the sharded state's all-gathers on the communication thread, and the forward's
    /// time blocked in their wait points.
    pub all_gather_ns: u64,
    /// Of `exposed_ns`, the forward's time blocked waiting for the all-gathers.
    pub gather_exposed_ns: u64,
    /// Per bucket, in launch order.
    pub buckets: Vec<BucketTiming>,
    /// Per layer (definition order): forward time, summed over micro-steps.
    pub layer_forward_ns: Vec<u64>,
    /// Per layer (definition order): backward time, summed over micro-steps.
    pub layer_backward_ns: Vec<u64>,
}

/// One bucket's communication in one rank's step, in nanoseconds (its bytes apart).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BucketTiming {
    /// Bytes this rank sent for it, in the format they travelled in (PowerSGD's two messages
    /// summed; a sharded bucket's reduce-scatter alone).
    pub bytes: u64,
    /// A sharded bucket's all-gather's bytes (FP32, whatever the reduce-scatter travelled in).
    pub gathered_bytes: u64,
    /// Its collectives' time on the communication thread: the all-reduce, or the reduce-scatter and
    /// the all-gather.
    pub all_reduce_ns: u64,
    /// Of `all_reduce_ns`, the lent parameters' updates run as the sums arrived.
    pub updates_ns: u64,
    /// The part of the wait points' blocked time during which this bucket was on the wire.
    pub exposed_ns: u64,
}

impl StepBreakdown {
    /// Forward, loss, backward, compression and optimizer: everything the compute thread does
    /// but wait.
    pub fn compute_ns(&self) -> u64 {
        self.forward_ns + self.loss_ns + self.backward_ns + self.update_ns + self.compress_ns
    }
}

/// Of `steps` (each one step's breakdowns), only those in which PowerSGD compressed, where it
/// compressed in any: its steady state, not the steps before its `start_iter`, which sent whole.
/// Returns how many were left out.
pub(crate) fn keep_compressed(steps: &mut Vec<&[StepBreakdown]>) -> usize {
    let compressed = |s: &&[StepBreakdown]| s.iter().any(|b| b.compress_ns > 0);
    let before = steps.len();
    if steps.iter().any(compressed) {
        steps.retain(compressed);
    }
    before - steps.len()
}

/// One breakdown per (rank, step) found in `spans`, ordered by step then rank. Only steps with
/// a complete `Step` span are kept; `layers` and `buckets` are the schedule's counts.
pub fn breakdowns(spans: &[Span], layers: usize, buckets: usize) -> Vec<StepBreakdown> {
    let mut sorted: Vec<&Span> = spans.iter().collect();
    sorted.sort_by_key(|s| (s.step, s.rank, s.start_ns));
    let mut out = Vec::new();
    for group in sorted.chunk_by(|a, b| (a.step, a.rank) == (b.step, b.rank)) {
        let Some(step) = group.iter().find(|s| s.activity == Activity::Step) else { continue };
        let mut b = StepBreakdown {
            step: step.step,
            rank: step.rank,
            step_ns: step.duration_ns(),
            buckets: vec![BucketTiming::default(); buckets],
            layer_forward_ns: vec![0; layers],
            layer_backward_ns: vec![0; layers],
            ..StepBreakdown::default()
        };
        for s in group {
            // A step counts the all-gathers its forward waited for, whole, even the part on the
            // wire since the update before it began; not those no step waits for, or it would
            // count two steps' worth (`Span::gathered_after`). Nothing else runs past its end.
            if s.gathered_after(step.end_ns) {
                continue;
            }
            let s = &Span { end_ns: s.end_ns.min(step.end_ns), ..**s };
            let d = if s.activity.is_communication() { s.duration_ns() } else { intersection(s, step) };
            match s.activity {
                Activity::Step => {}
                // Host work, in the step's time beside compute and exposed communication.
                Activity::Fill => b.fill_ns += d,
                Activity::Forward { layer } => {
                    b.forward_ns += d;
                    if let Some(t) = b.layer_forward_ns.get_mut(layer as usize) {
                        *t += d;
                    }
                }
                Activity::Loss => b.loss_ns += d,
                Activity::Backward { layer } => {
                    b.backward_ns += d;
                    if let Some(t) = b.layer_backward_ns.get_mut(layer as usize) {
                        *t += d;
                    }
                }
                Activity::Update { .. } | Activity::Clip => b.update_ns += d,
                Activity::Compress { .. } => b.compress_ns += d,
                Activity::Wait { .. } | Activity::WaitAll => b.exposed_ns += d,
                Activity::WaitGather { .. } => {
                    b.exposed_ns += d;
                    b.gather_exposed_ns += d;
                }
                // A sharded bucket's reduce-scatter and all-gather are the halves of its
                // all-reduce: the reduce-scatter's bytes in `bytes` (as they travelled), the
                // all-gather's in `gathered_bytes`.
                Activity::AllReduce { bucket, bytes, .. }
                | Activity::ReduceScatter { bucket, bytes, .. }
                | Activity::AllGather { bucket, bytes, .. } => {
                    b.all_reduce_ns += d;
                    if let Some(t) = b.buckets.get_mut(bucket as usize) {
                        // PowerSGD sends two messages per bucket and step.
                        if matches!(s.activity, Activity::AllGather { .. }) {
                            b.all_gather_ns += d;
                            t.gathered_bytes += bytes;
                        } else {
                            t.bytes += bytes;
                        }
                        if let Activity::AllReduce { updates_ns, .. } | Activity::ReduceScatter { updates_ns, .. } =
                            s.activity
                        {
                            t.updates_ns += updates_ns.min(d);
                        }
                        t.all_reduce_ns += d;
                        t.exposed_ns +=
                            group.iter().filter(|w| w.activity.is_wait()).map(|w| intersection(w, s)).sum::<u64>();
                    }
                }
            }
        }
        out.push(b);
    }
    out
}

fn intersection(a: &Span, b: &Span) -> u64 {
    a.end_ns.min(b.end_ns).saturating_sub(a.start_ns.max(b.start_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(rank: u32, step: u64, activity: Activity, start_ns: u64, end_ns: u64) -> Span {
        Span { rank, step, activity, start_ns, end_ns }
    }

    #[test]
    fn sums_by_kind_and_attributes_waits_to_the_buckets_on_the_wire() {
        let spans = [
            span(0, 1, Activity::Step, 0, 100),
            span(0, 1, Activity::Forward { layer: 0 }, 0, 20),
            span(0, 1, Activity::Loss, 20, 22),
            span(0, 1, Activity::Backward { layer: 0 }, 22, 60),
            span(0, 1, Activity::AllReduce { bucket: 0, bytes: 400, queued_ns: 40, updates_ns: 12 }, 40, 70),
            span(0, 1, Activity::AllReduce { bucket: 1, bytes: 800, queued_ns: 60, updates_ns: 0 }, 70, 90),
            // Blocked from 60 to 75: bucket 0 was on the wire until 70, bucket 1 from 70.
            span(0, 1, Activity::Wait { bucket: 0 }, 60, 75),
            span(0, 1, Activity::Update { bucket: 0 }, 75, 80),
            span(0, 1, Activity::Wait { bucket: 1 }, 80, 90),
            span(0, 1, Activity::Update { bucket: 1 }, 90, 100),
            // A step without its `Step` span (cut off by a window) is left out.
            span(0, 2, Activity::Forward { layer: 0 }, 100, 120),
        ];
        let b = breakdowns(&spans, 1, 2);
        assert_eq!(b.len(), 1);
        let b = &b[0];
        assert_eq!((b.step_ns, b.forward_ns, b.loss_ns, b.backward_ns, b.update_ns), (100, 20, 2, 38, 15));
        assert_eq!((b.all_reduce_ns, b.exposed_ns, b.compute_ns()), (50, 25, 75));
        assert_eq!(
            b.buckets[0],
            BucketTiming { bytes: 400, all_reduce_ns: 30, updates_ns: 12, exposed_ns: 10, ..Default::default() }
        );
        assert_eq!(
            b.buckets[1],
            BucketTiming { bytes: 800, all_reduce_ns: 20, updates_ns: 0, exposed_ns: 15, ..Default::default() }
        );
        assert_eq!((b.layer_forward_ns.as_slice(), b.layer_backward_ns.as_slice()), (&[20][..], &[38][..]));
    }

    /// The sharded state's all-gathers after the last step (or before a held-out pass) carry
    /// that step's number but lie after its end: they are no part of it.
    #[test]
    fn what_runs_after_the_step_is_not_counted_in_it() {
        let spans = [
            span(0, 1, Activity::Step, 0, 100),
            span(0, 1, Activity::Forward { layer: 0 }, 0, 40),
            span(0, 1, Activity::ReduceScatter { bucket: 0, bytes: 400, queued_ns: 50, updates_ns: 0 }, 50, 70),
            span(0, 1, Activity::Wait { bucket: 0 }, 60, 70),
            // Launched by the update at 90, waited for after the step, at 110.
            span(0, 1, Activity::AllGather { bucket: 0, bytes: 400, queued_ns: 90 }, 90, 130),
            span(0, 1, Activity::WaitGather { bucket: 0 }, 110, 130),
            // Step 2's forward waited for the all-gather step 1's update launched: tagged 2, on
            // the wire from 95, before step 2 began, and all of it counts there.
            span(0, 2, Activity::Step, 100, 200),
            span(0, 2, Activity::AllGather { bucket: 0, bytes: 400, queued_ns: 90 }, 95, 125),
            span(0, 2, Activity::WaitGather { bucket: 0 }, 100, 125),
        ];
        let b = &breakdowns(&spans, 1, 1);
        assert_eq!((b[0].step_ns, b[0].all_reduce_ns, b[0].all_gather_ns), (100, 20, 0));
        assert_eq!((b[0].exposed_ns, b[0].gather_exposed_ns), (10, 0));
        assert_eq!(
            b[0].buckets[0],
            BucketTiming { bytes: 400, all_reduce_ns: 20, updates_ns: 0, exposed_ns: 10, ..Default::default() }
        );
        assert_eq!((b[1].all_gather_ns, b[1].gather_exposed_ns, b[1].exposed_ns), (30, 25, 25));
        // The gather running past step 1's end counts in no step, its bytes neither.
        assert_eq!((b[0].buckets[0].gathered_bytes, b[1].buckets[0].gathered_bytes), (0, 400));
    }
}
