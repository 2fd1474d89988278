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

/// The partial sums of squares, `CLIP_BLOCKS` per bucket, kept from step to step.
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
        let needed = CLIP_BLOCKS * buckets.len().max(1);
        if self.partials.as_ref().is_none_or(|p| p.len() < needed) {
            self.partials =
                Some(gpu.compute().alloc_zeros::<f64>(needed).map_err(cuda("allocating the clipping partial sums"))?);
        }
        let partials = self.partials.as_mut().expect("allocated above");
        for (k, bucket) in buckets.iter().enumerate() {
            let mut out = partials.slice_mut(k * CLIP_BLOCKS..(k + 1) * CLIP_BLOCKS);
            let counted = shards.map_or(0..bucket.len(), |shards| shards[k].clone());
            ops::sum_squares(gpu, counted.len(), bucket.slice(counted), &mut out)?;
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
