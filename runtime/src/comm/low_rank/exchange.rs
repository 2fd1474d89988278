//! The communicator's side of a low-rank bucket: the launch of P's all-reduce, the turnaround
//! from P to Q (see `in_flight` for the stages), and, without overlap, the three stages run
//! back to back once backward is done.

use std::time::Instant;

use super::super::bucket::GradBucket;
use super::super::in_flight::{InFlight, Reduced};
use super::super::lent::{BucketMember, ParamVecs};
use super::super::mailbox::{Mailbox, Reply};
use super::super::mode::CommMode;
use super::super::mpi_thread::MpiThread;
use super::super::{Communicator, Held};
use super::in_flight::{compress, decompress, in_factor, project, LowRankP, LowRankQ, PStage, QStage};
use crate::error::{Error, Result};
use crate::optim::Optimizer;

impl Communicator {
    /// Starts summing low-rank bucket `bucket` over all ranks: PowerSGD's first all-reduce, of
    /// P = M·Q and the values sent whole, or the whole bucket while it goes uncompressed. Every
    /// rank must launch the same buckets in the same order (the schedule guarantees it).
    ///
    /// As with `all_reduce_and_update`, the bucket's parameters, `members`, and their optimizer
    /// state are lent to it (unless `--check-finite`): the decompression updates them as it
    /// makes each row of the approximation, and `step` takes them back.
    pub fn all_reduce_low_rank<P: ParamVecs, O: Optimizer>(
        &self,
        mut bucket: GradBucket,
        members: &[BucketMember],
        params: &mut P,
        optimizer: &mut O,
        grad_scale: f32,
    ) -> LowRankP {
        if !self.checks.get().finite {
            bucket.lend_for_update(members, params, optimizer, grad_scale);
        }
        let world = self.world_size();
        // A run-time format (`--grad-comm`) sends the bucket whole in that format.
        let chosen = self.wire_format_chosen();
        let compresses = match bucket.low_rank_parts() {
            Some((state, ..)) => state.begin_step(world) && !chosen,
            None => false,
        };
        if !compresses {
            return LowRankP(PStage::Whole(self.all_reduce_async(bucket)));
        }
        if self.mode.get() == CommMode::AfterBackward && self.transport().is_some() {
            return LowRankP(PStage::Whole(self.hold_low_rank(bucket)));
        }
        let p = compress(&mut bucket);
        LowRankP(PStage::Summing { bucket, p: self.all_reduce_async(p) })
    }

    /// Holds low-rank bucket `bucket` until `backward_done` (no overlap), which runs its
    /// exchanges (the trace records them there); the handle waits for the result as for a
    /// bucket all-reduced whole.
    fn hold_low_rank(&self, bucket: GradBucket) -> InFlight {
        let index = bucket.index();
        let (reply, pending) = self.mailbox(index);
        self.held.borrow_mut().push(Held::LowRank(bucket, reply));
        InFlight::pending(index, 0, Instant::now(), pending, self.checks.get())
    }

    /// Sums `message` over all ranks through `t` and waits for it (for `backward_done`).
    fn exchange_now(&self, t: &MpiThread, mut message: GradBucket) -> Result<GradBucket> {
        let (index, bytes) = (message.index(), self.choose_wire_format(&mut message));
        let (reply, pending) = Mailbox::open(&mut self.exchanges.borrow_mut());
        let queued = Instant::now();
        t.all_reduce(message, reply);
        InFlight::pending(index, bytes, queued, pending, self.checks.get()).wait()
    }

    /// Runs a held low-rank bucket's three stages back to back (`backward_done` without
    /// overlap) and hands it to `reply`; a failure reaches the wait point (a timeout as timed
    /// out, any other with the bucket handed back). `Err` after a timeout, when every wait was
    /// given up.
    pub(in crate::comm) fn low_rank_after_backward(
        &self,
        t: &MpiThread,
        mut bucket: GradBucket,
        reply: Reply<Reduced>,
    ) -> std::result::Result<(), TimedOut> {
        let mut stages = || -> Result<()> {
            let p = self.exchange_now(t, compress(&mut bucket)).map_err(|e| in_factor(e, "P"))?;
            let q = self.exchange_now(t, project(&mut bucket, p)).map_err(|e| in_factor(e, "Q"))?;
            decompress(&mut bucket, q);
            Ok(())
        };
        let failure = match stages() {
            Ok(()) => None,
            Err(Error::CommTimeout { .. }) => {
                // Given up before `reply` drops: its wait reports the timeout, not a dead thread.
                self.give_up_waits();
                return Err(TimedOut);
            }
            Err(e) => Some(e),
        };
        // Its exchanges are in the trace already: this adds nothing to them.
        let now = Instant::now();
        reply.send(Reduced { bucket, started: now, finished: now, failure });
        Ok(())
    }
}

/// A low-rank exchange timed out (and every wait was given up).
pub(in crate::comm) struct TimedOut;

impl LowRankP {
    /// P's wait point: once P is summed, orthogonalises it, computes Q = Mᵀ·P and starts Q's
    /// all-reduce. A failure is kept for `step` to report.
    pub fn reduce_q(self, comm: &Communicator) -> LowRankQ {
        LowRankQ(match self.0 {
            PStage::Whole(whole) => QStage::Whole(whole),
            PStage::Summing { mut bucket, p } => match p.wait() {
                Ok(p) => {
                    let q = project(&mut bucket, p);
                    QStage::Summing { bucket, q: comm.all_reduce_async(q) }
                }
                Err(e) => {
                    if matches!(e, Error::CommTimeout { .. }) {
                        // The later buckets wait for the same rank: they fail at once.
                        comm.give_up_waits();
                    }
                    QStage::Failed(in_factor(e, "P"))
                }
            },
        })
    }
}
