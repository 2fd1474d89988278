//! Clipping by the global gradient norm on the GPU: the squares of every bucket's sums reduced
//! on the device into fixed partial sums, which the host adds in f64 (one copy out per step, the
//! only time a clipping step's host waits for the GPU), then the same `GradClip` as the CPU's
//! turns the norm into the factor of every update.

use std::ops::Range;

use cudarc::driver::CudaSlice;

use super::gpu::{cuda, Gpu};
use super::nccl::GpuComm;
use super::ops::{self, CLIP_BLOCKS};
use crate::error::Result;
use crate::optim::GradClip;

/// Elements one `sum_squares` launch reads at most: its count is an `int` (a parameter is
/// refused past that by the macro, but a bucket of many may hold more).
const PIECE: usize = i32::MAX as usize;

/// The launches of `size` elements at most for a bucket of `len`: as many on every rank (a
/// rank's shard is no longer than its bucket), so that the partial sums NCCL adds over the
/// ranks line up.
fn launches(len: usize, size: usize) -> usize {
    len.div_ceil(size).max(1)
}

/// Launch `j`'s part of `counted`: `size` elements or fewer, empty past its end.
fn piece(counted: &Range<usize>, j: usize, size: usize) -> Range<usize> {
    let start = j.saturating_mul(size).saturating_add(counted.start).min(counted.end);
    start..start.saturating_add(size).min(counted.end)
}

/// The partial sums of squares, `CLIP_BLOCKS` per launch (one per bucket but for buckets past
/// `PIECE`), kept from step to step.
#[derive(Default)]
pub struct ClipPartials {
    partials: Option<CudaSlice<f64>>,
}

impl ClipPartials {
    /// `grad_scale` times the clipping factor of `buckets`' global norm (see `GradClip::scale`).
    /// With `shards`, each bucket's squares are those of this rank's shard (its range); with
    /// `over_ranks`, the partial sums are summed over the ranks by NCCL before they are read.
    pub fn scale(
        &mut self,
        gpu: &Gpu,
        buckets: &[&CudaSlice<f32>],
        shards: Option<&[Range<usize>]>,
        over_ranks: Option<&GpuComm>,
        clip: &mut GradClip,
        grad_scale: f32,
    ) -> Result<f32> {
        let slots: usize = buckets.iter().map(|b| launches(b.len(), PIECE)).sum();
        let needed = CLIP_BLOCKS * slots.max(1);
        if self.partials.as_ref().is_none_or(|p| p.len() < needed) {
            self.partials =
                Some(gpu.compute().alloc_zeros::<f64>(needed).map_err(cuda("allocating the clipping partial sums"))?);
        }
        let partials = self.partials.as_mut().expect("allocated above");
        let mut slot = 0;
        for (k, bucket) in buckets.iter().enumerate() {
            let counted = shards.map_or(0..bucket.len(), |shards| shards[k].clone());
            for j in 0..launches(bucket.len(), PIECE) {
                let mut out = partials.slice_mut(slot * CLIP_BLOCKS..(slot + 1) * CLIP_BLOCKS);
                let part = piece(&counted, j, PIECE);
                ops::sum_squares(gpu, part.len(), bucket.slice(part), &mut out)?;
                slot += 1;
            }
        }
        if let Some(comm) = over_ranks {
            comm.sum_f64_in_place(partials)?;
        }
        // The copy waits for the GPU, and the sums before it for every rank: within the bound.
        gpu.finish("summing the gradients' squares for clipping on the GPU")?;
        let host = gpu
            .compute()
            .clone_dtoh(&partials.slice(..needed))
            .map_err(cuda("copying the gradient norm's partial sums out"))?;
        Ok(clip.scale(host.iter().sum(), grad_scale))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_past_one_launch_is_summed_in_pieces_that_cover_it_once() {
        assert_eq!(launches(PIECE, PIECE), 1);
        assert_eq!(launches(PIECE + 1, PIECE), 2);
        assert_eq!(launches(0, PIECE), 1, "an empty bucket still writes its partials");
        // A bucket of 10 in pieces of 4, whole and as a rank's shard 3..9: the same launches.
        for counted in [0..10, 3..9, 5..5] {
            let parts: Vec<_> = (0..launches(10, 4)).map(|j| piece(&counted, j, 4)).collect();
            assert_eq!(parts.len(), 3);
            assert!(parts.iter().all(|p| p.len() <= 4));
            let covered: Vec<usize> = parts.into_iter().flatten().collect();
            assert_eq!(covered, counted.clone().collect::<Vec<_>>(), "{counted:?}");
        }
    }
}
