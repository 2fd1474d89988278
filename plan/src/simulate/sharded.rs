//! What sharded optimizer state (ZeRO-1) changes about a bucket in the simulation: it is
//! reduce-scattered (half an all-reduce) and its updated parameters all-gathered (see
//! `simulate_sharded`).

use super::SimBucket;
use crate::link::Link;

impl SimBucket {
    /// Its reduce-scatter on `link` across `world` ranks: half its all-reduce (the conversions
    /// of a narrow format whole).
    pub fn reduce_scatter_seconds(&self, link: &Link, world: usize) -> f64 {
        if self.low_rank.is_some() {
            // Never sharded (refused): its two all-reduces.
            return self.comm_seconds(link, world);
        }
        link.ring_reduce_scatter_seconds(self.wire_bytes(), world) + self.conversion_seconds(world)
    }

    /// The all-gather of its updated parameters (FP32, whatever the gradients' format).
    pub fn all_gather_seconds(&self, link: &Link, world: usize) -> f64 {
        link.ring_all_gather_seconds(self.bytes, world)
    }
}
