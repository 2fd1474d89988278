//! The number format gradients travel in between ranks, and the conversions to and from it.
//!
//! FP32 (the default) sends the gradients as they are. BF16 and FP16 send half the bytes, with
//! one rule that keeps the arithmetic FP32 (issue 17): a rank rounds its values to the narrow
//! type (round-to-nearest-even, through the `half` crate) only to send them; whoever sums a part
//! widens each rank's values and adds them in FP32, in rank order, its own values unrounded;
//! the sum is rounded once to the narrow type for the return trip, and every rank widens it back
//! into its FP32 bucket before the update. Optimizer state and parameters stay FP32.
//!
//! FP16 reaches only ±65504, so values are scaled by 1/world before narrowing (as PyTorch DDP's
//! `fp16_compress_hook` does): the narrow sum is then the mean, which fits whenever the mean does.
//! Widening multiplies by world again, so the bucket holds the sum in every format and the
//! averaging the update already applies (`grad_scale`) gives the mean as it does for FP32. A value
//! that still overflows becomes ±inf; `--check-finite` turns it into `Error::WireOverflow`, and
//! without the check it reaches the update, as a non-finite FP32 gradient would.
//!
//! With one rank (one process, or `mpirun -n 1`; or `CommMode::Skip`) nothing is sent, so nothing
//! is rounded: the results are FP32's, bit for bit.

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};

pub use overlap_plan::WireFormat;

/// Each bucket's format (by index, in launch order): what the run chose, else the one its
/// schedule planned (which the bucket carries: `GradBucket::planned`).
#[derive(Clone, Debug, Default)]
pub(crate) struct WirePlan {
    pub chosen: Option<Chosen>,
}

/// A run-time choice of formats; the last one made stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Chosen {
    /// One for every bucket (`--grad-comm`).
    All(WireFormat),
    /// One per bucket, FP32 past the list's end.
    ByBucket(Vec<WireFormat>),
}

impl WirePlan {
    /// Bucket `bucket`'s format, where its schedule planned `planned`.
    pub(crate) fn of(&self, bucket: usize, planned: WireFormat) -> WireFormat {
        match &self.chosen {
            Some(Chosen::All(format)) => *format,
            Some(Chosen::ByBucket(list)) => list.get(bucket).copied().unwrap_or_default(),
            None => planned,
        }
    }

    /// The run-time choice as one number every rank must agree on (0: none, the schedule's).
    pub(crate) fn override_code(&self) -> u64 {
        match &self.chosen {
            None => 0,
            Some(Chosen::All(format)) => *format as u64 + 1,
            // FNV-1a of the list, marked apart from the codes above by its top bit.
            Some(Chosen::ByBucket(list)) => {
                let mut hash = overlap_plan::Fnv::new();
                list.iter().for_each(|&f| hash.usize(f as usize + 1));
                hash.finish() | 1 << 63
            }
        }
    }
}

/// Elements converted at a time through a stack buffer: 16 KiB of f32, inside L1.
pub(crate) const BLOCK: usize = 1 << 12;

/// The conversions of one narrow format for a job of `world` ranks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Narrowing {
    format: WireFormat,
    /// Applied before narrowing (fp16: 1/world), and its inverse after widening.
    scale: f32,
    unscale: f32,
}

impl Narrowing {
    /// `None` for FP32, which needs no conversion.
    pub(crate) fn new(format: WireFormat, world: usize) -> Option<Self> {
        let (scale, unscale) = match format {
            WireFormat::Fp32 => return None,
            WireFormat::Bf16 => (1.0, 1.0),
            WireFormat::Fp16 => (1.0 / world as f32, world as f32),
        };
        Some(Narrowing { format, scale, unscale })
    }

    /// The format the values travel in.
    pub(crate) fn format(&self) -> WireFormat {
        self.format
    }

    /// `wire = narrow(values · scale)`, rounded to nearest even.
    pub(crate) fn narrow(&self, values: &[f32], wire: &mut [u16]) {
        debug_assert_eq!(values.len(), wire.len());
        let mut scaled = [0.0f32; BLOCK];
        for (values, wire) in values.chunks(BLOCK).zip(wire.chunks_mut(BLOCK)) {
            let values = if self.scale == 1.0 {
                values
            } else {
                let scaled = &mut scaled[..values.len()];
                scaled.iter_mut().zip(values).for_each(|(s, v)| *s = v * self.scale);
                &*scaled
            };
            self.round(values, wire);
        }
    }

    /// `values = widen(wire) · unscale`: the sums back in FP32, undoing the scaling.
    pub(crate) fn widen(&self, wire: &[u16], values: &mut [f32]) {
        self.widen_scaled(wire, values);
        if self.unscale != 1.0 {
            values.iter_mut().for_each(|v| *v *= self.unscale);
        }
    }

    /// Sums `count` ranks' values of one part in FP32, in rank order, and rounds the sum once
    /// into `sums`: rank `me`'s own values `own` (scaled, never rounded), the others' narrow
    /// values as `theirs(rank)` gives them. Every slice is `sums.len()` long; `own` may be
    /// shorter, for a part padded past the bucket's end, where it counts as zeros.
    pub(crate) fn sum_once<'a>(
        &self,
        count: usize,
        me: usize,
        own: &[f32],
        theirs: impl Fn(usize) -> &'a [u16],
        sums: &mut [u16],
    ) {
        let mut acc = [0.0f32; BLOCK];
        let mut other = [0.0f32; BLOCK];
        for start in (0..sums.len()).step_by(BLOCK) {
            let block = start..(start + BLOCK).min(sums.len());
            let acc = &mut acc[..block.len()];
            let own = &own[block.start.min(own.len())..block.end.min(own.len())];
            for rank in 0..count {
                if rank == me {
                    let (values, padding) = acc.split_at_mut(own.len());
                    if rank == 0 {
                        values.iter_mut().zip(own).for_each(|(a, v)| *a = v * self.scale);
                        padding.fill(0.0);
                    } else {
                        values.iter_mut().zip(own).for_each(|(a, v)| *a += v * self.scale);
                    }
                } else if rank == 0 {
                    self.widen_scaled(&theirs(rank)[block.clone()], acc);
                } else {
                    let other = &mut other[..block.len()];
                    self.widen_scaled(&theirs(rank)[block.clone()], other);
                    acc.iter_mut().zip(&*other).for_each(|(a, o)| *a += o);
                }
            }
            self.round(acc, &mut sums[block]);
        }
    }

    /// `wire = narrow(values)`, without scaling.
    fn round(&self, values: &[f32], wire: &mut [u16]) {
        match self.format {
            WireFormat::Bf16 => wire.reinterpret_cast_mut::<bf16>().convert_from_f32_slice(values),
            WireFormat::Fp16 => wire.reinterpret_cast_mut::<f16>().convert_from_f32_slice(values),
            WireFormat::Fp32 => unreachable!("FP32 is never narrowed"),
        }
    }

    /// `values = widen(wire)`, still scaled.
    fn widen_scaled(&self, wire: &[u16], values: &mut [f32]) {
        match self.format {
            WireFormat::Bf16 => wire.reinterpret_cast::<bf16>().convert_to_f32_slice(values),
            WireFormat::Fp16 => wire.reinterpret_cast::<f16>().convert_to_f32_slice(values),
            WireFormat::Fp32 => unreachable!("FP32 is never narrowed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(format: WireFormat, world: usize, x: f32) -> f32 {
        let n = Narrowing::new(format, world).unwrap();
        let mut wire = [0u16; 1];
        n.narrow(&[x], &mut wire);
        let mut back = [0.0f32; 1];
        n.widen(&wire, &mut back);
        back[0]
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        let bf = WireFormat::Bf16;
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: the tie goes to the even significand, 1.
        assert_eq!(round_trip(bf, 1, 1.0 + 2f32.powi(-8)), 1.0);
        // 1 + 3·2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
        assert_eq!(round_trip(bf, 1, 1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        // Just above a tie rounds up; just below, down.
        assert_eq!(round_trip(bf, 1, 1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 1.0 + 2f32.powi(-7));
        assert_eq!(round_trip(bf, 1, 1.0 + 2f32.powi(-8) - 2f32.powi(-20)), 1.0);
        // FP32's range: huge and subnormal values survive (to 8 significant bits).
        assert_eq!(round_trip(bf, 1, 3.0e38), bf16::from_f32(3.0e38).to_f32());
        assert!((round_trip(bf, 1, 3.0e38) - 3.0e38).abs() < 3.0e38 * 2f32.powi(-8));
        // Subnormals round the same way: a tie to even, and just above a tie, up.
        assert_eq!(round_trip(bf, 1, f32::from_bits(0x0003_8000)), f32::from_bits(0x0004_0000));
        assert_eq!(round_trip(bf, 1, f32::from_bits(0x0002_8000)), f32::from_bits(0x0002_0000));
        assert_eq!(round_trip(bf, 1, f32::from_bits(0x0002_8001)), f32::from_bits(0x0003_0000));
        assert_eq!(round_trip(bf, 1, f32::INFINITY), f32::INFINITY);
        assert!(round_trip(bf, 1, f32::NAN).is_nan());
        // Rounding past the largest finite bf16 gives inf.
        assert_eq!(round_trip(bf, 1, f32::MAX), f32::INFINITY);
    }

    #[test]
    fn fp16_rounds_to_nearest_even_and_scales_by_world() {
        let fp = WireFormat::Fp16;
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to even, 1; 1 + 3·2^-11: up to 1 + 2^-9.
        assert_eq!(round_trip(fp, 1, 1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(round_trip(fp, 1, 1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
        // Subnormals: fp16's smallest is 2^-24; half of it is a tie to even (0), 3/2 of it rounds to 2.
        assert_eq!(round_trip(fp, 1, 2f32.powi(-24)), 2f32.powi(-24));
        assert_eq!(round_trip(fp, 1, 2f32.powi(-25)), 0.0);
        assert_eq!(round_trip(fp, 1, 1.5 * 2f32.powi(-24)), 2.0 * 2f32.powi(-24));
        // 65504 is the largest finite value; 65520 (halfway to 65536) rounds to inf.
        assert_eq!(round_trip(fp, 1, 65504.0), 65504.0);
        assert_eq!(round_trip(fp, 1, 65520.0), f32::INFINITY);
        assert_eq!(round_trip(fp, 1, -70000.0), f32::NEG_INFINITY);
        // Scaled by 1/3 on the way out and by 3 on the way back: 1.8e5 survives with 3 ranks.
        let back = round_trip(fp, 3, 1.8e5);
        assert!(back.is_finite() && (back - 1.8e5).abs() <= 1.8e5 * 2f32.powi(-11), "{back}");
    }

    #[test]
    fn sums_in_fp32_in_rank_order_and_rounds_once() {
        // Three ranks' values whose narrow partial sums would round differently: each is
        // 1 + 2^-8 (a bf16 tie, rounded to 1 when sent), and rank 1's own value stays exact.
        let n = Narrowing::new(WireFormat::Bf16, 3).unwrap();
        let x = 1.0 + 2f32.powi(-8);
        let mut sent = [0u16; 1];
        n.narrow(&[x], &mut sent);
        let mut sums = [0u16; 1];
        n.sum_once(3, 1, &[x], |_| &sent[..], &mut sums);
        let mut back = [0.0f32; 1];
        n.widen(&sums, &mut back);
        // 1 + (1 + 2^-8) + 1 = 3 + 2^-8, rounded once to bf16: 3.
        assert_eq!(back[0], bf16::from_f32(1.0 + x + 1.0).to_f32());
        // A part padded past the bucket's end: the owner's missing values count as zeros.
        let mut sums = [0u16; 2];
        let twos = [sent[0]; 2];
        n.sum_once(2, 1, &[x], |_| &twos[..], &mut sums);
        let mut back = [0.0f32; 2];
        n.widen(&sums, &mut back);
        assert_eq!(back, [bf16::from_f32(1.0 + x).to_f32(), 1.0]);
    }

    #[test]
    fn formats_parse_and_print_their_names() {
        for f in [WireFormat::Fp32, WireFormat::Bf16, WireFormat::Fp16] {
            assert_eq!(f.name().parse::<WireFormat>(), Ok(f));
        }
        assert!("fp8".parse::<WireFormat>().unwrap_err().contains("fp32, bf16 or fp16"));
    }

    #[test]
    fn a_run_time_choice_overrides_the_schedule() {
        use WireFormat::{Bf16, Fp16, Fp32};
        let mut plan = WirePlan::default();
        assert_eq!((plan.of(0, Bf16), plan.of(1, Fp16), plan.of(2, Fp32)), (Bf16, Fp16, Fp32), "the planned ones");
        assert_eq!(plan.override_code(), 0);
        plan.chosen = Some(Chosen::ByBucket(vec![Fp16]));
        assert_eq!((plan.of(0, Bf16), plan.of(1, Bf16)), (Fp16, Fp32), "a chosen list, FP32 past it");
        let list_code = plan.override_code();
        plan.chosen = Some(Chosen::ByBucket(vec![Bf16]));
        assert_ne!(plan.override_code(), list_code, "another list, another code");
        plan.chosen = Some(Chosen::All(Bf16));
        assert_eq!((plan.of(0, Fp32), plan.of(1, Fp16), plan.of(7, Fp32)), (Bf16, Bf16, Bf16), "one for all");
        assert_eq!(plan.override_code(), Bf16 as u64 + 1);
        assert_ne!(list_code, Fp32 as u64 + 1);
    }
}
