//! A low-rank bucket's two all-reduces, as the generated code places them: launched after the
//! layer that completes the bucket (`Communicator::all_reduce_low_rank`: P = M·Q, P's
//! all-reduce), turned around after the next layer with parameters (`LowRankP::reduce_q`: P's
//! wait point, orthogonalisation, Q = Mᵀ·P, Q's all-reduce), and waited for in `step`
//! (`LowRankQ::wait`: Q's wait point, M̂ = P·Qᵀ and the new error). Each stage is its own type,
//! so the order cannot be broken: only a `LowRankQ` reaches `step`. The first two live with the
//! communicator, in `exchange`.

use std::time::Instant;

use super::super::bucket::GradBucket;
use super::super::in_flight::InFlight;
use crate::error::{Error, Result};
use crate::trace::recorder::record;
use crate::trace::span::Activity;

/// A low-rank bucket whose P factors (with the values sent whole) are being summed. Opaque: only
/// `reduce_q` moves it on.
#[must_use = "a low-rank bucket must be turned around with `reduce_q`, then waited for in `step`"]
pub struct LowRankP(pub(super) PStage);

#[allow(
    clippy::large_enum_variant,
    reason = "one per low-rank bucket in flight; boxing the bucket would allocate every step"
)]
pub(super) enum PStage {
    /// Sent whole (the first `start_iter` steps, a run-time `--grad-comm`, or without overlap):
    /// the bucket comes back summed.
    Whole(InFlight),
    /// P on the wire; the bucket holds M (gradients plus errors) meanwhile.
    Summing { bucket: GradBucket, p: InFlight },
}

/// A low-rank bucket whose Q factors are being summed: what `step` waits for. Opaque: only
/// `wait` ends it.
#[must_use = "in-flight gradients must be passed to `step`"]
pub struct LowRankQ(pub(super) QStage);

#[allow(
    clippy::large_enum_variant,
    reason = "one per low-rank bucket in flight; boxing the bucket would allocate every step"
)]
pub(super) enum QStage {
    /// Sent whole, as `PStage::Whole`: the bucket comes back summed.
    Whole(InFlight),
    /// Q on the wire; the bucket holds M until `wait` makes the approximation of the sum from it.
    Summing { bucket: GradBucket, q: InFlight },
    /// P's wait point failed (a timeout, a dead communication thread): `wait` reports it.
    Failed(Error),
}

impl LowRankQ {
    /// Q's wait point: blocks until Q is summed, then makes the approximation of the sum over
    /// ranks (updating the lent parameters with it, or writing it into the bucket), keeps this
    /// rank's errors, and returns the bucket.
    pub fn wait(self) -> Result<GradBucket> {
        match self.0 {
            QStage::Whole(whole) => whole.wait(),
            QStage::Summing { mut bucket, q } => {
                let q = q.wait().map_err(|e| in_factor(e, "Q"))?;
                decompress(&mut bucket, q);
                Ok(bucket)
            }
            QStage::Failed(e) => Err(e),
        }
    }
}

/// `error` from summing a low-rank bucket's factor `factor` ("P" or "Q"): a non-finite sum
/// there sits at an offset of the factor, not of the bucket's parameters, so it is named as the
/// factor's.
pub(super) fn in_factor(error: Error, factor: &'static str) -> Error {
    match error {
        Error::NonFiniteGradient { bucket, value, .. } => Error::NonFiniteFactor { bucket, factor, value },
        other => other,
    }
}

/// Each stage's compute, recorded as the bucket's compression on the compute thread.
fn compressing<T>(bucket: usize, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = work();
    record(Activity::Compress { bucket: bucket as u32 }, started, Instant::now());
    out
}

/// P = M·Q (with the values sent whole), as a bucket to sum.
pub(super) fn compress(bucket: &mut GradBucket) -> GradBucket {
    let index = bucket.index();
    let (state, grads, _) = bucket.low_rank_parts().expect("only low-rank buckets compress");
    GradBucket::from_vec(index, compressing(index, || state.compress(grads)))
}

/// With P summed: Q = Mᵀ·P, as a bucket to sum.
pub(super) fn project(bucket: &mut GradBucket, p: GradBucket) -> GradBucket {
    let index = bucket.index();
    let (state, grads, _) = bucket.low_rank_parts().expect("only low-rank buckets compress");
    GradBucket::from_vec(index, compressing(index, || state.project(grads, p.into_vec())))
}

/// With Q summed: M̂, the update or the bucket, and the new errors.
pub(super) fn decompress(bucket: &mut GradBucket, q: GradBucket) {
    let index = bucket.index();
    let (state, grads, lent) = bucket.low_rank_parts().expect("only low-rank buckets compress");
    compressing(index, || state.decompress(grads, lent, q.into_vec()));
}
