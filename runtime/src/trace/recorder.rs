//! The per-thread span recorder the generated code and the runtime write to.
//!
//! Recording is always compiled in. When it is off, a span costs one thread-local flag read;
//! when it is on, two clock reads and a push into a buffer reserved up front. The recorder is
//! thread-local because everything a rank's compute thread does (the macro's straight-line code,
//! the loss, the waits) runs on that thread; the communication thread reports its timings with
//! each reduced bucket instead of writing here.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use super::span::{Activity, Span};

thread_local! {
    static ENABLED: Cell<bool> = const { Cell::new(false) };
    /// Recording, but inside `paused`: the step's own collectives still go in.
    static PAUSED: Cell<bool> = const { Cell::new(false) };
    static RECORDER: RefCell<Recorder> = RefCell::new(Recorder::new());
}

struct Recorder {
    epoch: Instant,
    rank: u32,
    step: u64,
    spans: Vec<Span>,
}

impl Recorder {
    fn new() -> Self {
        Recorder { epoch: Instant::now(), rank: 0, step: 0, spans: Vec::new() }
    }

    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    fn push(&mut self, activity: Activity, start: Instant, end: Instant) {
        let span = Span { rank: self.rank, step: self.step, activity, start_ns: self.ns(start), end_ns: self.ns(end) };
        self.spans.push(span);
    }
}

/// Starts recording on this thread for `rank`, with time zero `epoch`, and room for `capacity`
/// spans before the buffer has to grow. Forgets anything recorded before.
pub fn start(rank: usize, capacity: usize, epoch: Instant) {
    RECORDER.with_borrow_mut(|r| {
        *r = Recorder { epoch, rank: rank as u32, step: 0, spans: Vec::with_capacity(capacity) };
    });
    ENABLED.set(true);
}

/// Stops recording on this thread (what was recorded stays until `take`).
pub fn stop() {
    ENABLED.set(false);
}

/// Whether this thread records spans now.
pub fn is_enabled() -> bool {
    ENABLED.get()
}

/// Runs `work` without recording its spans on this thread (work that is not part of a step).
pub fn paused<T>(work: impl FnOnce() -> T) -> T {
    let was = ENABLED.replace(false);
    let was_paused = PAUSED.replace(was || PAUSED.get());
    let out = work();
    PAUSED.set(was_paused);
    ENABLED.set(was);
    out
}

/// The step that spans recorded from now on belong to.
pub fn set_step(step: u64) {
    if is_enabled() {
        RECORDER.with_borrow_mut(|r| r.step = step);
    }
}

/// Everything recorded so far, leaving the buffer empty (with its capacity kept).
pub fn take() -> Vec<Span> {
    RECORDER.with_borrow_mut(|r| {
        let capacity = r.spans.capacity();
        std::mem::replace(&mut r.spans, Vec::with_capacity(capacity))
    })
}

/// Hands what was recorded so far to `read`, then empties the buffer, which keeps its capacity:
/// a gather encodes the spans where they lie, with no second buffer of a window's size. `read`
/// runs with the recorder borrowed, so it must not record.
pub fn drain<T>(read: impl FnOnce(&[Span]) -> T) -> T {
    RECORDER.with_borrow_mut(|r| {
        let out = read(&r.spans);
        r.spans.clear();
        out
    })
}

/// Records an activity whose instants were measured elsewhere (the communication thread, a wait).
pub fn record(activity: Activity, start: Instant, end: Instant) {
    if is_enabled() {
        RECORDER.with_borrow_mut(|r| r.push(activity, start, end));
    }
}

/// When a bucket's collective ran: launched at `queued`, on the communication thread from
/// `started` to `finished`, of which `updates` went to the lent parameters' updates.
#[derive(Clone, Copy, Debug)]
pub struct CollectiveTimes {
    /// When backward launched it (under `--no-overlap` it is handed over only after backward).
    pub queued: Instant,
    /// When the communication thread started on it.
    pub started: Instant,
    /// When the communication thread finished with it.
    pub finished: Instant,
    /// Of `started..finished`, the time spent updating the parameters lent with the bucket.
    pub updates: Duration,
}

/// Records one bucket's all-reduce.
pub fn record_all_reduce(bucket: usize, bytes: usize, times: CollectiveTimes) {
    if is_enabled() {
        RECORDER.with_borrow_mut(|r| {
            let (queued_ns, updates_ns) = (r.ns(times.queued), times.updates.as_nanos() as u64);
            let activity = Activity::AllReduce { bucket: bucket as u32, bytes: bytes as u64, queued_ns, updates_ns };
            r.push(activity, times.started, times.finished);
        });
    }
}

/// As `record_all_reduce`, for a bucket's all-gather of updated shards. Also inside `paused`: the
/// all-gathers a step launched belong to it (and are tagged with it) even where what waits for
/// them is not (a held-out pass's forward).
pub fn record_all_gather(bucket: usize, bytes: usize, queued: Instant, started: Instant, finished: Instant) {
    if is_enabled() || PAUSED.get() {
        RECORDER.with_borrow_mut(|r| {
            let activity = Activity::AllGather { bucket: bucket as u32, bytes: bytes as u64, queued_ns: r.ns(queued) };
            r.push(activity, started, finished);
        });
    }
}

/// As `record_all_reduce`, for a bucket's reduce-scatter whose all-gather comes in the next
/// forward.
pub fn record_reduce_scatter(bucket: usize, bytes: usize, times: CollectiveTimes) {
    if is_enabled() {
        RECORDER.with_borrow_mut(|r| {
            let (queued_ns, updates_ns) = (r.ns(times.queued), times.updates.as_nanos() as u64);
            r.push(
                Activity::ReduceScatter { bucket: bucket as u32, bytes: bytes as u64, queued_ns, updates_ns },
                times.started,
                times.finished,
            );
        });
    }
}

/// Measures from now until the guard is dropped.
#[must_use = "the span ends when this guard is dropped"]
pub struct SpanGuard {
    open: Option<(Activity, Instant)>,
}

impl SpanGuard {
    /// A span of `activity` from now until the guard is dropped; nothing when this thread is not
    /// recording.
    pub fn new(activity: Activity) -> Self {
        SpanGuard { open: is_enabled().then(|| (activity, Instant::now())) }
    }
}

impl Drop for SpanGuard {
    fn drop(&mut self) {
        if let Some((activity, start)) = self.open.take() {
            record(activity, start, Instant::now());
        }
    }
}

/// Layer `layer`'s forward call (its index in `Schedule::layers`, blocks unrolled).
pub fn forward(layer: usize) -> SpanGuard {
    SpanGuard::new(Activity::Forward { layer: layer as u32 })
}

/// Layer `layer`'s backward call.
pub fn backward(layer: usize) -> SpanGuard {
    SpanGuard::new(Activity::Backward { layer: layer as u32 })
}

/// The optimizer updates of bucket `bucket`'s parameters.
pub fn update(bucket: usize) -> SpanGuard {
    SpanGuard::new(Activity::Update { bucket: bucket as u32 })
}

/// The global gradient norm of a clipping run.
pub fn clip() -> SpanGuard {
    SpanGuard::new(Activity::Clip)
}

/// The host filling a micro-batch.
pub fn fill() -> SpanGuard {
    SpanGuard::new(Activity::Fill)
}

/// The loss and its gradient with respect to the model's output.
pub fn loss() -> SpanGuard {
    SpanGuard::new(Activity::Loss)
}

/// A whole training step.
pub fn step() -> SpanGuard {
    SpanGuard::new(Activity::Step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_while_enabled_and_tags_the_current_step() {
        drop(forward(0));
        assert!(take().is_empty());
        start(3, 16, Instant::now());
        set_step(7);
        {
            let _outer = step();
            drop(backward(2));
        }
        stop();
        drop(update(1));
        let spans = take();
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[0].activity, Activity::Backward { layer: 2 });
        assert_eq!(spans[1].activity, Activity::Step);
        assert!(spans.iter().all(|s| s.rank == 3 && s.step == 7 && s.start_ns <= s.end_ns));
        assert!(spans[1].start_ns <= spans[0].start_ns && spans[0].end_ns <= spans[1].end_ns);
        assert!(take().is_empty());
    }

    #[test]
    fn a_pause_keeps_out_its_own_work_but_not_the_steps_all_gathers() {
        let now = Instant::now();
        paused(|| record_all_gather(0, 4, now, now, now));
        assert!(take().is_empty(), "nothing while not recording, paused or not");
        start(0, 8, now);
        set_step(4);
        paused(|| {
            drop(forward(0));
            paused(|| record_all_gather(1, 64, now, now, now));
            record_all_gather(2, 64, now, now, now);
        });
        drop(loss());
        stop();
        let spans = take();
        let activities: Vec<Activity> = spans.iter().map(|s| s.activity).collect();
        let gather = |bucket| Activity::AllGather { bucket, bytes: 64, queued_ns: 0 };
        assert_eq!(activities, [gather(1), gather(2), Activity::Loss]);
        assert!(spans.iter().all(|s| s.step == 4));
        assert!(!PAUSED.get() && !is_enabled(), "a pause ends where it ends");
    }

    #[test]
    fn drain_reads_the_spans_in_place_and_keeps_the_buffer() {
        start(0, 8, Instant::now());
        drop(forward(1));
        drop(loss());
        stop();
        let capacity = RECORDER.with_borrow(|r| r.spans.capacity());
        let read = drain(|spans| spans.iter().map(|s| s.activity).collect::<Vec<_>>());
        assert_eq!(read, [Activity::Forward { layer: 1 }, Activity::Loss]);
        assert_eq!(RECORDER.with_borrow(|r| (r.spans.len(), r.spans.capacity())), (0, capacity));
    }
}
