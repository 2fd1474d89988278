//! Where dropout's masks come from: a hash of where each element is (the run's seed, the layer,
//! the element's row counted over the run's global batches, its column), not a generator's
//! state, so that backward recomputes a mask instead of keeping it, the GPU draws the CPU's, and a
//! resumed or re-ranked run draws what the uninterrupted one would have. `StepContext` carries a
//! micro-step's draw; `Dropout` and attention's weights read it.

/// Draws are compared on 24 bits: rates are resolved to 2⁻²⁴.
const DRAW_BITS: u32 = 24;

/// The dropout of one micro-step, carried by its `StepContext`: the rate and where the step's
/// elements are. `NONE` (and the default) drops nothing: held-out loss, sampling, inference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DropoutDraw {
    /// An element is dropped when its 24-bit draw is below this: the rate times 2²⁴, rounded.
    threshold: u32,
    /// `1 / (1 - rate)` rounded to f32 (PyTorch's factor), as bits, so that the context stays `Eq`.
    scale_bits: u32,
    /// The run's seed, mixed with the layer's index by `for_layer`.
    stream: u64,
    /// The global index of the micro-batch's first row: its first sample's index in the run times
    /// the positions per sample.
    first_row: u64,
}

impl DropoutDraw {
    /// Nothing dropped.
    pub const NONE: DropoutDraw = DropoutDraw { threshold: 0, scale_bits: 0x3f80_0000, stream: 0, first_row: 0 };

    /// Drops elements at `rate` (in `[0, 1)`, checked by the `Trainer`'s preflight), drawn from
    /// `seed`, for a micro-batch whose first row is row `first_row` of the run.
    pub fn new(rate: f32, seed: u64, first_row: u64) -> Self {
        assert!((0.0..1.0).contains(&rate), "a dropout rate is in [0, 1), not {rate}");
        let full = 1u64 << DRAW_BITS;
        let threshold = ((f64::from(rate) * full as f64).round() as u64).min(full - 1) as u32;
        let scale = (1.0 / (1.0 - f64::from(rate))) as f32;
        DropoutDraw { threshold, scale_bits: scale.to_bits(), stream: splitmix64(seed), first_row }
    }

    /// Whether anything is dropped.
    pub const fn active(&self) -> bool {
        self.threshold > 0
    }

    /// The factor kept elements are multiplied by.
    pub fn scale(&self) -> f32 {
        f32::from_bits(self.scale_bits)
    }

    /// The 24-bit threshold below which a draw drops its element (what the GPU kernel compares).
    pub const fn threshold(&self) -> u32 {
        self.threshold
    }

    /// The stream the masks are hashed from (the seed's, mixed with a layer's index).
    pub const fn stream(&self) -> u64 {
        self.stream
    }

    /// The run-wide index of the micro-batch's first row.
    pub const fn first_row(&self) -> u64 {
        self.first_row
    }

    /// The draw of layer `index` (in definition order): every layer's mask is its own.
    pub const fn for_layer(self, index: usize) -> Self {
        DropoutDraw { stream: splitmix64(self.stream ^ (index as u64 + 1).wrapping_mul(GOLDEN_64)), ..self }
    }

    /// The draw of attention's weights, `[sequences, heads, T, T]` as rows of `T`: row `r` of
    /// the micro-batch's weights is row `first_row · heads + r` of the run's, so that they too
    /// are masked alike however the global batch is split.
    pub const fn for_weights(self, heads: usize) -> Self {
        DropoutDraw { first_row: self.first_row.wrapping_mul(heads as u64), ..self }
    }

    /// The multipliers of row `row` (of the micro-batch), one per column: `scale` where the
    /// element is kept, 0 where it is dropped (0, not a cleared element: NaN and infinity still
    /// give NaN, as PyTorch's `x * mask * scale`).
    pub(crate) fn row_factors(&self, row: usize) -> impl Iterator<Item = f32> + '_ {
        let key = row_key(self.stream, self.first_row.wrapping_add(row as u64));
        let scale = self.scale();
        (0u32..).map(move |col| if element_draw(key, col) >= self.threshold { scale } else { 0.0 })
    }

    /// Rows `first..` (of the micro-batch) of `width` elements, of which the first `seen` are
    /// masked, from `from` into `to`: `to = from ∘ mask · scale` (the `Dropout` layer: every
    /// column; attention's weights: the keys a panel's rows see).
    pub(crate) fn drop_rows(&self, first: usize, (from, to): (&[f32], &mut [f32]), (width, seen): (usize, usize)) {
        assert!(u32::try_from(seen).is_ok(), "dropout: {seen} columns do not fit the draw's column index");
        for (i, (from, to)) in from.chunks_exact(width).zip(to.chunks_exact_mut(width)).enumerate() {
            for ((to, &x), factor) in to[..seen].iter_mut().zip(&from[..seen]).zip(self.row_factors(first + i)) {
                *to = x * factor;
            }
        }
    }

    /// [`DropoutDraw::drop_rows`] in place (attention's weight gradients, masked as the weights
    /// were).
    pub(crate) fn mask_rows(&self, first: usize, rows: &mut [f32], (width, seen): (usize, usize)) {
        assert!(u32::try_from(seen).is_ok(), "dropout: {seen} columns do not fit the draw's column index");
        for (i, row) in rows.chunks_exact_mut(width).enumerate() {
            for (value, factor) in row[..seen].iter_mut().zip(self.row_factors(first + i)) {
                *value *= factor;
            }
        }
    }
}

impl Default for DropoutDraw {
    fn default() -> Self {
        DropoutDraw::NONE
    }
}

const GOLDEN_64: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finaliser: a bijection of `u64` with full avalanche.
const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN_64);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// MurmurHash3's 32-bit finaliser: a bijection of `u32` with full avalanche.
const fn fmix32(x: u32) -> u32 {
    let mut h = x;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The key of run-wide row `row` of a stream (computed once per row).
pub const fn row_key(stream: u64, row: u64) -> u64 {
    splitmix64(stream ^ row.wrapping_mul(GOLDEN_64))
}

/// The 24-bit draw of column `col` of a row: uniform, independent across columns, rows, layers
/// and seeds as far as the two finalisers mix. `kernels/elementwise.cu` computes the same.
pub const fn element_draw(row_key: u64, col: u32) -> u32 {
    fmix32(fmix32(col ^ row_key as u32) ^ (row_key >> 32) as u32) >> (32 - DRAW_BITS)
}
