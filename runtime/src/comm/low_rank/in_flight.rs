//! A low-rank bucket's two all-reduces, as the generated code places them: launched after the
//! layer that completes the bucket (`Communicator::all_reduce_low_rank`: error feedback, P = M·Q,
//! P's all-reduce), turned around after the next layer with parameters (`LowRankP::reduce_q`:
//! P's wait point, orthogonalisation, Q = Mᵀ·P, Q's all-reduce), and waited for in `step`
//! (`LowRankQ::wait`: Q's wait point, M̂ = P·Qᵀ and the new error). Each stage is its own type,
//! so the order cannot be broken: only a `LowRankQ` reaches `step`.
//!
//! Without overlap (`CommMode::AfterBackward`) the bucket is held, whole, until `backward_done`,
//! which runs the three stages back to back; the placed calls then have nothing left to do.

use std::time::Instant;

use super::super::bucket::{GradBucket, InFlight};
use super::super::lent::{BucketMember, ParamVecs};
use super::super::mode::CommMode;
use super::super::Communicator;
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use crate::trace::recorder::record;
use crate::trace::span::Activity;

/// A low-rank bucket whose P factors (with the values sent whole) are being summed.
#[must_use = "a low-rank bucket must be turned around with `reduce_q`, then waited for in `step`"]
pub enum LowRankP {
    /// Sent whole (the first `start_iter` steps, a run-time `--grad-comm`, or without overlap):
    /// the bucket comes back summed.
    Whole(InFlight),
    /// P on the wire; the bucket holds M (gradients plus error) meanwhile.
    Summing { bucket: GradBucket, p: InFlight },
}

/// A low-rank bucket whose Q factors are being summed: what `step` waits for.
#[must_use = "in-flight gradients must be passed to `step`"]
pub enum LowRankQ {
    Whole(InFlight),
    Summing {
        bucket: GradBucket,
        q: InFlight,
    },
    /// P's wait point failed (a timeout, a dead communication thread): `wait` reports it.
    Failed(Error),
}

impl Communicator {
    /// Starts summing low-rank bucket `bucket` over all ranks: PowerSGD's first all-reduce, of
    /// P = (M + e)·Q and the values sent whole, or the whole bucket while it goes uncompressed.
    /// Every rank must launch the same buckets in the same order (the schedule guarantees it).
    ///
    /// As with `all_reduce_and_update`, the bucket's parameters, `members`, and their optimizer
    /// state are lent to it (unless `--check-finite`): the decompression updates them as it
    /// writes each block of the approximation, and `step` takes them back.
    pub fn all_reduce_low_rank<P: ParamVecs, O: Optimizer>(
        &self,
        mut bucket: GradBucket,
        members: &[BucketMember],
        params: &mut P,
        optimizer: &mut O,
        grad_scale: f32,
    ) -> LowRankP {
        if !self.checks.finite {
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
            return LowRankP::Whole(self.all_reduce_async(bucket));
        }
        if self.mode == CommMode::AfterBackward && self.transport().is_some() {
            return LowRankP::Whole(self.hold_low_rank(bucket));
        }
        let p = compress(&mut bucket);
        LowRankP::Summing { bucket, p: self.all_reduce_async(p) }
    }

    /// Runs a held low-rank bucket's three stages back to back (`backward_done` without
    /// overlap), through `exchange`, which sums a message and waits for it.
    pub(in crate::comm) fn low_rank_now(
        &self,
        mut bucket: GradBucket,
        exchange: impl Fn(GradBucket) -> Result<GradBucket>,
    ) -> Result<GradBucket> {
        let p = exchange(compress(&mut bucket))?;
        let q = exchange(project(&mut bucket, p))?;
        decompress(&mut bucket, q);
        Ok(bucket)
    }
}

impl LowRankP {
    /// P's wait point: once P is summed, orthogonalises it, computes Q = Mᵀ·P and starts Q's
    /// all-reduce. A failure is kept for `step` to report.
    pub fn reduce_q(self, comm: &Communicator) -> LowRankQ {
        match self {
            LowRankP::Whole(whole) => LowRankQ::Whole(whole),
            LowRankP::Summing { mut bucket, p } => match p.wait() {
                Ok(p) => {
                    let q = project(&mut bucket, p);
                    LowRankQ::Summing { bucket, q: comm.all_reduce_async(q) }
                }
                Err(e) => LowRankQ::Failed(e),
            },
        }
    }
}

impl LowRankQ {
    /// Q's wait point: blocks until Q is summed, then writes the approximation of the sum over
    /// ranks into the bucket (and keeps this rank's error) and returns it.
    pub fn wait(self) -> Result<GradBucket> {
        match self {
            LowRankQ::Whole(whole) => whole.wait(),
            LowRankQ::Summing { mut bucket, q } => {
                let q = q.wait()?;
                decompress(&mut bucket, q);
                Ok(bucket)
            }
            LowRankQ::Failed(e) => Err(e),
        }
    }

    /// Which bucket this is, in launch order.
    pub fn index(&self) -> Option<usize> {
        match self {
            LowRankQ::Whole(f) => Some(f.index()),
            LowRankQ::Summing { bucket, .. } => Some(bucket.index()),
            LowRankQ::Failed(_) => None,
        }
    }
}

/// Each stage's compute, recorded as the bucket's compression on the compute thread.
fn compressing<T>(bucket: usize, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = work();
    record(Activity::Compress { bucket: bucket as u32 }, started, Instant::now());
    out
}

fn compress(bucket: &mut GradBucket) -> GradBucket {
    let index = bucket.index();
    let (state, grads, _) = bucket.low_rank_parts().expect("only low-rank buckets compress");
    compressing(index, || state.compress(grads))
}

fn project(bucket: &mut GradBucket, p: GradBucket) -> GradBucket {
    let index = bucket.index();
    let (state, grads, _) = bucket.low_rank_parts().expect("only low-rank buckets compress");
    compressing(index, || state.project(grads, p))
}

fn decompress(bucket: &mut GradBucket, q: GradBucket) {
    let index = bucket.index();
    let (state, grads, lent) = bucket.low_rank_parts().expect("only low-rank buckets compress");
    compressing(index, || state.decompress(grads, lent, q));
}
