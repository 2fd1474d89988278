//! Observability: what each rank spent its step on, and whether communication was hidden.
//!
//! The compute thread records spans (`recorder`); the communication thread's timings come back
//! with each reduced bucket. `collect` gathers every rank's spans at rank 0, where they become
//! per-step breakdowns (`breakdown`), the overlap report (`report`), a Chrome trace (`chrome`)
//! and a timeline picture (`timeline`).

mod blocks;
mod breakdown;
mod bucket_report;
mod canvas;
mod chrome;
pub(crate) mod clock;
mod collect;
mod labels;
// The recording half, which the communicators record into, addressed directly by them: they are
// below the half that gathers and reports (`collect` uses a communicator).
pub(crate) mod recorder;
mod report;
mod report_text;
mod sampled_steps;
pub(crate) mod span;
mod stats;
mod timeline;

pub use breakdown::{breakdowns, BucketTiming, StepBreakdown};
pub use bucket_report::BucketReport;
pub use chrome::write_chrome_trace;
pub use collect::gather_spans;
pub use recorder::{
    backward, clip, fill, forward, is_enabled, loss, paused, record, record_all_gather, record_all_reduce,
    record_reduce_scatter, set_step, start, step, stop, take, update, CollectiveTimes, SpanGuard,
};
pub use report::{AfterPause, Memory, OverlapReport, PredictedStep, RankReport};
pub use sampled_steps::{Sampled, SampledSteps};
pub use span::{Activity, RunInfo, Span};
pub use stats::median;
pub use timeline::{render as render_timeline, representative_step, write_timeline};
