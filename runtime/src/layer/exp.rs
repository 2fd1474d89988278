//! `exp` for attention's softmax, in arithmetic the compiler vectorises: libm's `expf` is a call
//! per element, and a GPT step takes one per allowed score (400 thousand for nanoGPT's CPU
//! configuration). Cody and Waite's reduction `x = k·ln 2 + r` with `|r| <= ln 2 / 2`, the
//! degree-7 polynomial Cephes uses for `exp(r)` in single precision, and `2^k` applied as two
//! powers of two written into exponent bits, so that subnormal results round once and overflow
//! gives infinity. Within 2 ulps of the correctly rounded value (`tests`); libm's is within 1.

use super::lanes::mul_add;

/// Inputs are clamped to this range, outside which `e^x` rounds to 0 or overflows in f32 alike.
const LOW: f32 = -104.0;
const HIGH: f32 = 89.0;
/// `log2(e)`.
const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split so that `k·LN2_HIGH` is exact for the `k` that occur.
const LN2_HIGH: f32 = 0.693_359_4;
const LN2_LOW: f32 = -2.121_944_4e-4;
/// Adding and subtracting `1.5·2^23` rounds a float of magnitude below `2^22` to an integer.
const ROUND: f32 = 12_582_912.0;
/// Cephes' `expf` polynomial `p`, highest degree first: `exp(r) ≈ 1 + r + r²·p(r)`.
const P: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_6e-1, 0.5];

/// `2^k` for `-75 <= k <= 64`, from its exponent bits.
#[inline(always)]
fn two_to(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// `e^x`, vectorisable (see the module's documentation). NaN stays NaN.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let c = x.clamp(LOW, HIGH);
    let shifted = c * LOG2_E + ROUND;
    let k = shifted - ROUND;
    let r = c - k * LN2_HIGH - k * LN2_LOW;
    let mut p = P[0];
    for &a in &P[1..] {
        p = mul_add(p, r, a);
    }
    let e_r = p * r * r + r + 1.0;
    // k lies in [-150, 128]: halves of it are normal powers of two, and the first product exact.
    let k = shifted.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let half = k >> 1;
    e_r * two_to(half) * two_to(k - half)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i32).abs_diff(b.to_bits() as i32)
    }

    #[test]
    fn within_2_ulps_of_the_correctly_rounded_value() {
        let (mut worst, mut sum, mut count) = (0, 0u64, 0u64);
        let mut x = -110.0f32;
        while x < 90.0 {
            let exact = f64::from(x).exp() as f32;
            let e = ulps(exp(x), exact);
            assert!(e <= 2, "exp({x}) = {} against {exact}: {e} ulps", exp(x));
            worst = worst.max(e);
            sum += u64::from(e);
            count += 1;
            x += 0.000_731;
        }
        assert!((sum as f64 / count as f64) < 0.5, "mean {} ulps (worst {worst})", sum as f64 / count as f64);
    }

    #[test]
    fn exact_where_the_softmax_needs_it_and_limits_outside() {
        assert_eq!(exp(0.0), 1.0, "the row's largest score weighs exactly 1");
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(-104.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(88.8), f32::INFINITY);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(-103.0), f64::from(-103.0f32).exp() as f32, "subnormal results round once");
        assert!(exp(f32::NAN).is_nan());
        for x in [-1e-7f32, 1e-7, -1e-3, 1.0, -1.0, 10.0, -10.0] {
            assert!(ulps(exp(x), f64::from(x).exp() as f32) <= 1, "exp({x})");
        }
    }
}
