//! Trace spans from CUDA events, so the overlap report, the trace and the timeline work on the
//! GPU as on the CPU. While recording, every span is a pair of timing events queued around its
//! work; after the step (the one host synchronisation per step) their GPU times are turned into
//! host instants, anchored at an event queued when the step began on an idle compute stream.
//!
//! All-gathers of sharded state are the exception: queued at the end of a step, they run on the
//! communication stream during the next step's forward, whose wait points order the compute
//! stream after them. So they are read at the end of the next step, against the anchor of the
//! step that queued them.

use std::time::{Duration, Instant};

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};

use super::gpu::{cuda, Gpu};
use super::nccl::EventPair;
use crate::error::Result;
use crate::trace::{self, Activity};

/// A step's spans as pairs of CUDA timing events, turned into host instants and recorded in the
/// trace once the step is done.
pub struct Timeline {
    enabled: bool,
    /// An event at the start of the step, and the host instant it stands for.
    anchor: Option<(CudaEvent, Instant)>,
    spans: Vec<(Activity, EventPair)>,
    /// `(bucket, bytes, events, sharded)` of each all-reduce (or, sharded, reduce-scatter) on
    /// the communication stream.
    all_reduces: Vec<(usize, usize, EventPair, bool)>,
    /// The all-gathers this step queued; those the previous step queued, read at this step's
    /// end; and that step's anchor.
    gathers: Vec<Gathered>,
    carried: Vec<Gathered>,
    previous: Option<(CudaEvent, Instant)>,
}

/// One all-gather of sharded state: its bucket, bytes, when the host queued it, and its events
/// on the communication stream.
struct Gathered {
    bucket: usize,
    bytes: usize,
    queued: Instant,
    events: EventPair,
}

impl Timeline {
    /// Records only when `enabled` (the report, trace or timeline asked for spans).
    pub fn new(enabled: bool) -> Self {
        Timeline {
            enabled,
            anchor: None,
            spans: Vec::new(),
            all_reduces: Vec::new(),
            gathers: Vec::new(),
            carried: Vec::new(),
            previous: None,
        }
    }

    /// Whether it records the step's spans now.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Records from now on only when `enabled`; returns whether it did before. All-gathers
    /// still to be read are forgotten when it stops.
    pub fn set_enabled(&mut self, enabled: bool) -> bool {
        if !enabled {
            self.gathers.clear();
            self.carried.clear();
            self.previous = None;
        }
        std::mem::replace(&mut self.enabled, enabled)
    }

    /// A timing event on `stream` now, when recording.
    pub fn stamp(&self, stream: &CudaStream) -> Result<Option<CudaEvent>> {
        self.enabled.then(|| timed_event(stream)).transpose()
    }

    /// Keeps the events of an all-gather of bucket `bucket`'s shards, queued now, for the end of
    /// the next step.
    pub fn all_gather(&mut self, bucket: usize, bytes: usize, events: EventPair) {
        if self.enabled {
            self.gathers.push(Gathered { bucket, bytes, queued: Instant::now(), events });
        }
    }

    /// Spans measured by events queued elsewhere (the wait points of the all-gathers).
    pub fn add_spans(&mut self, spans: impl IntoIterator<Item = (Activity, EventPair)>) {
        if self.enabled {
            self.spans.extend(spans);
        }
    }

    /// Marks the start of a step; the GPU is idle (the previous step was synchronised).
    pub fn begin_step(&mut self, gpu: &Gpu) -> Result<()> {
        if self.enabled {
            self.anchor = Some((timed_event(gpu.compute())?, Instant::now()));
        }
        Ok(())
    }

    /// Queues `work` on the compute stream between two timing events recorded as `activity`.
    pub fn span<T>(&mut self, gpu: &Gpu, activity: Activity, work: impl FnOnce(&Gpu) -> Result<T>) -> Result<T> {
        if !self.enabled {
            return work(gpu);
        }
        let start = timed_event(gpu.compute())?;
        let value = work(gpu)?;
        self.spans.push((activity, (start, timed_event(gpu.compute())?)));
        Ok(value)
    }

    /// The start of a span whose work is queued by several calls (a bucket's updates); `None`
    /// when not recording. `finish` ends it.
    pub fn start(&mut self, gpu: &Gpu) -> Result<Option<CudaEvent>> {
        self.stamp(gpu.compute())
    }

    /// Ends the span `start` began, recorded as `activity`.
    pub fn finish(&mut self, gpu: &Gpu, activity: Activity, start: Option<CudaEvent>) -> Result<()> {
        if let Some(start) = start {
            self.spans.push((activity, (start, timed_event(gpu.compute())?)));
        }
        Ok(())
    }

    /// As `span`, for the compute stream's wait for bucket `bucket`: its length is the time the
    /// compute stream sat idle until the sum arrived (the exposed communication).
    pub fn wait<T>(&mut self, gpu: &Gpu, bucket: usize, work: impl FnOnce(&Gpu) -> Result<T>) -> Result<T> {
        self.span(gpu, Activity::Wait { bucket: bucket as u32 }, work)
    }

    /// Keeps the timing events of bucket `bucket`'s all-reduce (`sharded`: reduce-scatter), if
    /// it was timed.
    pub fn all_reduce(&mut self, bucket: usize, bytes: usize, events: Option<EventPair>, sharded: bool) {
        if let (true, Some(events)) = (self.enabled, events) {
            self.all_reduces.push((bucket, bytes, events, sharded));
        }
    }

    /// After the step's synchronisation: turns every event pair into a trace span.
    pub fn end_step(&mut self) -> Result<()> {
        let Some((anchor, at)) = self.anchor.take() else { return Ok(()) };
        let instant = |event: &CudaEvent| instant_of(event, (&anchor, at));
        // The previous step's all-gathers: this step's forward waited for each (an event not
        // complete would be a group no forward read; it is left out rather than waited for).
        if let Some((previous, previous_at)) = self.previous.take() {
            for g in self.carried.drain(..) {
                if g.events.1.is_complete() {
                    let (start, end) = (&g.events.0, &g.events.1);
                    let (started, finished) =
                        (instant_of(start, (&previous, previous_at))?, instant_of(end, (&previous, previous_at))?);
                    trace::record_all_gather(g.bucket, g.bytes, g.queued, started, finished);
                }
            }
        }
        self.carried = std::mem::take(&mut self.gathers);
        for (activity, (start, end)) in self.spans.drain(..) {
            trace::record(activity, instant(&start)?, instant(&end)?);
        }
        for (bucket, bytes, (start, end), sharded) in self.all_reduces.drain(..) {
            let (started, finished) = (instant(&start)?, instant(&end)?);
            let record = if sharded { trace::record_reduce_scatter } else { trace::record_all_reduce };
            let updates = Duration::ZERO; // the GPU updates after the wait points
            record(bucket, bytes, trace::CollectiveTimes { queued: started, started, finished, updates });
        }
        self.previous = Some((anchor, at));
        Ok(())
    }
}

/// The host instant of `event`, from its GPU time after `anchor`, an event of host instant `at`.
fn instant_of(event: &CudaEvent, (anchor, at): (&CudaEvent, Instant)) -> Result<Instant> {
    let ms = anchor.elapsed_ms(event).map_err(cuda("reading a timing event"))?;
    // A time no instant can hold is the driver's garbage, not a span.
    let offset = Duration::try_from_secs_f64(f64::from(ms.max(0.0)) / 1e3).ok();
    offset.and_then(|d| at.checked_add(d)).ok_or_else(|| cuda("reading a timing event")(ms))
}

/// An event on `stream` that records its time (cudarc's default event does not).
pub(super) fn timed_event(stream: &CudaStream) -> Result<CudaEvent> {
    stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda("recording a timing event"))
}
