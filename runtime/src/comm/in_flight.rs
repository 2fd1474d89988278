//! The wait point: `InFlight`, a bucket being reduced, which has no way to read the data; only
//! `InFlight::wait` gives the bucket back, after checking what the run asked for (a time limit,
//! finite sums) and timing the reduction for the trace.

use std::time::{Duration, Instant};

use super::bucket::{GradBucket, Sharding};
use super::mailbox::{Pending, Undelivered};
use super::wire::WireFormat;
use crate::error::{Error, Result};
use crate::trace::recorder::{record, record_all_reduce, record_reduce_scatter, CollectiveTimes};
use crate::trace::span::Activity;

/// A reduced bucket as the communication thread hands it back, with when it was on the wire.
pub(crate) struct Reduced {
    pub bucket: GradBucket,
    pub started: Instant,
    pub finished: Instant,
    /// What failed on the way, for the wait point to report: a low-rank bucket's exchanges, run
    /// back to back after backward (`Communicator::low_rank_after_backward`), end in the bucket
    /// handed back with their error.
    pub failure: Option<Error>,
}

/// A bucket being all-reduced. The only way back to the data is `wait`.
#[must_use = "an in-flight bucket must be waited on before its gradients can be used"]
pub struct InFlight {
    index: usize,
    state: State,
}

enum State {
    /// Nothing to reduce (world size 1): the bucket is already final.
    Ready(GradBucket, WaitChecks),
    /// The communication thread owns the bucket and sends it back when the reduction is done.
    Pending { reply: Pending<Reduced>, bytes: usize, queued: Instant, checks: WaitChecks },
}

/// What `wait` checks besides waiting.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WaitChecks {
    /// Give up after this long (`--comm-timeout`).
    pub timeout: Option<Duration>,
    /// Fail on a NaN or infinity in the reduced gradients (`--check-finite`).
    pub finite: bool,
    /// This rank, for the messages.
    pub rank: usize,
}

impl InFlight {
    pub(crate) fn ready(bucket: GradBucket, checks: WaitChecks) -> Self {
        InFlight { index: bucket.index(), state: State::Ready(bucket, checks) }
    }

    /// A bucket of `bytes` handed to the communication thread at `queued`.
    pub(crate) fn pending(
        index: usize,
        bytes: usize,
        queued: Instant,
        reply: Pending<Reduced>,
        checks: WaitChecks,
    ) -> Self {
        InFlight { index, state: State::Pending { reply, bytes, queued, checks } }
    }

    /// Which bucket this is, in launch order.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Blocks until the all-reduce has finished and returns the bucket holding the sum over all
    /// ranks. The time blocked and the reduction itself go to the trace.
    pub fn wait(self) -> Result<GradBucket> {
        let (bucket, checks) = match self.state {
            State::Ready(bucket, checks) => (bucket, checks),
            State::Pending { reply, bytes, queued, checks } => {
                let blocked = Instant::now();
                let reduced = reply.wait(checks.timeout).map_err(|e| match e {
                    Undelivered::TimedOut => Error::CommTimeout {
                        bucket: self.index,
                        rank: checks.rank,
                        waited: checks.timeout.unwrap_or_default(),
                        behind: super::board::laggards(),
                    },
                    Undelivered::Abandoned => Error::CommThreadDied("reducing a gradient bucket"),
                })?;
                record(Activity::Wait { bucket: self.index as u32 }, blocked, Instant::now());
                if let Some(failure) = reduced.failure {
                    return Err(failure);
                }
                let (started, finished, updates) =
                    (reduced.started, reduced.finished, reduced.bucket.lent().updating());
                let times = CollectiveTimes { queued, started, finished, updates };
                if reduced.bucket.sharding() == Sharding::Sharded {
                    record_reduce_scatter(self.index, bytes, times);
                } else {
                    record_all_reduce(self.index, bytes, times);
                }
                (reduced.bucket, checks)
            }
        };
        if checks.finite {
            // A sharded bucket's sums were checked with every rank's (`ShardServer::clip`): the
            // first non-finite one is reported at its own bucket's wait point.
            let found = match bucket.lent().non_finite() {
                Some((at, offset, value)) => (at == self.index).then_some((offset, value)),
                None => {
                    let data = bucket.as_slice();
                    data.iter().position(|g| !g.is_finite()).map(|offset| (offset, data[offset]))
                }
            };
            if let Some((offset, value)) = found {
                let (index, format) = (self.index, bucket.wire_format());
                // An infinity from a narrow format is (almost surely) its range, not the model.
                return Err(if format != WireFormat::Fp32 && value.is_infinite() {
                    Error::WireOverflow { bucket: index, format, offset, value }
                } else {
                    Error::NonFiniteGradient { bucket: index, offset, value }
                });
            }
        }
        Ok(bucket)
    }
}
