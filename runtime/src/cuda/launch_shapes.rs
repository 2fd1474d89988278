//! How many blocks of how many threads each kernel is launched with. Plain arithmetic with no
//! CUDA types, so that the CPU emulation of the kernels (`tests/kernel-emulation`) launches them
//! exactly as the GPU backend does (it includes this file).

/// Threads per block of the grid-stride kernels, and of the one-block-per-row reductions (a
/// power of two, at most 1024, as those kernels require).
pub const THREADS: u32 = 256;

/// Blocks of `sum_squares`: the partial sums per bucket the host adds up (its shared array is
/// sized for `THREADS` = 256 threads).
pub const CLIP_BLOCKS: usize = 256;

/// A one-dimensional launch: `grid` blocks of `block` threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub grid: u32,
    pub block: u32,
}

/// Enough blocks for `n` elements, one per thread, capped (the kernels loop over the rest).
pub fn elementwise(n: usize) -> Shape {
    Shape { grid: n.div_ceil(THREADS as usize).clamp(1, 65_535) as u32, block: THREADS }
}

/// Columns per block of the column sums (`bias_grad`, `layer_norm_backward_params`: the kernels'
/// `COLUMN_TILE`); their `THREADS` stand in `THREADS / COLUMN_TILE` lanes of rows.
pub const COLUMN_TILE: usize = 32;
const _: () = assert!((THREADS as usize).is_multiple_of(COLUMN_TILE), "a block is whole lanes of a column tile");

/// A column sum over `cols` columns: one block per tile of `COLUMN_TILE` columns, capped (the
/// kernels loop over the rest).
pub fn column_tiles(cols: usize) -> Shape {
    Shape { grid: cols.div_ceil(COLUMN_TILE).clamp(1, 65_535) as u32, block: THREADS }
}

/// One block per row.
pub fn per_row(rows: usize) -> Shape {
    Shape { grid: rows.clamp(1, u32::MAX as usize) as u32, block: THREADS }
}

/// `sum_squares`: `CLIP_BLOCKS` partial sums.
pub fn clip() -> Shape {
    Shape { grid: CLIP_BLOCKS as u32, block: THREADS }
}
