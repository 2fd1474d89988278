//! The layers' matrix products as cuBLAS takes them, in plain arithmetic with no CUDA types, so
//! that the CPU emulation of the backend (`tests/kernel-emulation`, which includes this file)
//! checks the very arguments `ops` passes.
//!
//! The layers hold row-major matrices; cuBLAS is column-major, where a row-major `r x c` matrix
//! is the column-major `c x r` matrix of its transpose. So `C = op(A)·op(B)` (row-major) is
//! computed as `Cᵀ = op(B)ᵀ·op(A)ᵀ` (column-major): cuBLAS's first operand is the row-major
//! product's second, and the other way round.

/// A row-major product `C (m x n) = op(A)·op(B) + beta·C` on views whose rows are `ld` apart
/// (`A`'s, `B`'s, `C`'s), `op` transposing where `transpose` says (`A`'s, `B`'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowMajor {
    pub transpose: (bool, bool),
    pub dims: (usize, usize, usize),
    pub ld: (usize, usize, usize),
}

/// One cuBLAS `sgemm`: `C (m x n, column-major, leading dimension ldc) = op(first)·op(second) +
/// beta·C`, with cuBLAS's own names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnMajor {
    pub transa: bool,
    pub transb: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
}

impl RowMajor {
    /// The same product as cuBLAS computes it; its first operand is this product's `B`, its
    /// second this product's `A`.
    pub fn column_major(self) -> ColumnMajor {
        let ((transpose_a, transpose_b), (m, n, k), (lda, ldb, ldc)) = (self.transpose, self.dims, self.ld);
        ColumnMajor { transa: transpose_b, transb: transpose_a, m: n, n: m, k, lda: ldb, ldb: lda, ldc }
    }

    /// Elements a view of `rows x cols` whose rows are `ld` apart must hold.
    fn needs(rows: usize, cols: usize, ld: usize) -> usize {
        if rows == 0 {
            0
        } else {
            (rows - 1) * ld + cols
        }
    }

    /// Elements `A`, `B` and `C` must hold.
    pub fn needs_elements(self) -> (usize, usize, usize) {
        let ((transpose_a, transpose_b), (m, n, k), (lda, ldb, ldc)) = (self.transpose, self.dims, self.ld);
        let (a_rows, a_cols) = if transpose_a { (k, m) } else { (m, k) };
        let (b_rows, b_cols) = if transpose_b { (n, k) } else { (k, n) };
        (Self::needs(a_rows, a_cols, lda), Self::needs(b_rows, b_cols, ldb), Self::needs(m, n, ldc))
    }
}

/// A linear layer's forward product `y = x·Wᵀ`: `A` = x `[rows, input]`, `B` = W
/// `[output, input]`, `C` = y `[rows, output]`.
pub fn projection(input: usize, output: usize, rows: usize) -> RowMajor {
    RowMajor { transpose: (false, true), dims: (rows, output, input), ld: (input, input, output) }
}

/// Its weight's gradient `dW = dyᵀ·x`: `A` = dy `[rows, output]`, `B` = x `[rows, input]`, `C` =
/// dW `[output, input]`.
pub fn weight_gradient(input: usize, output: usize, rows: usize) -> RowMajor {
    RowMajor { transpose: (true, false), dims: (output, input, rows), ld: (output, input, input) }
}

/// Its input's gradient `dx = dy·W`: `A` = dy `[rows, output]`, `B` = W `[output, input]`, `C` =
/// dx `[rows, input]`.
pub fn input_gradient(input: usize, output: usize, rows: usize) -> RowMajor {
    RowMajor { transpose: (false, false), dims: (rows, input, output), ld: (output, input, input) }
}

/// One causal self-attention call: `sequences` of `t` positions, `width` features in `heads`
/// heads. Its buffers: `qkv` `[rows, 3·width]`, `probs` `[sequences, heads, t, t]`, `heads`
/// `[rows, width]`, and in backward their gradients `d_qkv`, `ds` and `d_heads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attention {
    pub sequences: usize,
    pub t: usize,
    pub width: usize,
    pub heads: usize,
}

/// A product of one head of one sequence, with where its `A`, `B` and `C` start in their
/// buffers (each function names them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadProduct {
    pub product: RowMajor,
    pub a: usize,
    pub b: usize,
    pub c: usize,
}

impl Attention {
    pub fn rows(&self) -> usize {
        self.sequences * self.t
    }

    /// Features per head.
    pub fn head(&self) -> usize {
        self.width / self.heads
    }

    /// Elements of the `[sequences, heads, t, t]` scores.
    pub fn scores(&self) -> usize {
        self.sequences * self.heads * self.t * self.t
    }

    /// Offset of sequence `s`'s first row, column `column`, in a matrix of `width` columns.
    fn at(&self, s: usize, width: usize, column: usize) -> usize {
        s * self.t * width + column
    }

    /// Offset of head `h` of sequence `s`'s `[t, t]` scores.
    fn scores_of(&self, s: usize, h: usize) -> usize {
        (s * self.heads + h) * self.t * self.t
    }

    /// Forward: the scores `q·kᵀ` (`A` = q and `B` = k in qkv, `C` in probs).
    pub fn head_scores(&self, s: usize, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        HeadProduct {
            product: RowMajor { transpose: (false, true), dims: (t, t, hd), ld: (3 * d, 3 * d, t) },
            a: self.at(s, 3 * d, h * hd),
            b: self.at(s, 3 * d, d + h * hd),
            c: self.scores_of(s, h),
        }
    }

    /// Forward: the head's output `P·v` (`A` in probs, `B` = v in qkv, `C` in heads).
    pub fn head_values(&self, s: usize, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        HeadProduct {
            product: RowMajor { transpose: (false, false), dims: (t, hd, t), ld: (t, 3 * d, d) },
            a: self.scores_of(s, h),
            b: self.at(s, 3 * d, 2 * d + h * hd),
            c: self.at(s, d, h * hd),
        }
    }

    /// Backward: the weights' gradient `dP = dy_h·vᵀ` (`A` in d_heads, `B` = v in qkv, `C` in ds).
    pub fn head_weights_gradient(&self, s: usize, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        HeadProduct {
            product: RowMajor { transpose: (false, true), dims: (t, t, hd), ld: (d, 3 * d, t) },
            a: self.at(s, d, h * hd),
            b: self.at(s, 3 * d, 2 * d + h * hd),
            c: self.scores_of(s, h),
        }
    }

    /// Backward: the values' gradient `dv = Pᵀ·dy_h` (`A` in probs, `B` in d_heads, `C` in d_qkv).
    pub fn head_values_gradient(&self, s: usize, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        HeadProduct {
            product: RowMajor { transpose: (true, false), dims: (t, hd, t), ld: (t, d, 3 * d) },
            a: self.scores_of(s, h),
            b: self.at(s, d, h * hd),
            c: self.at(s, 3 * d, 2 * d + h * hd),
        }
    }

    /// Backward: the queries' gradient `dq = dS·k` (`A` in ds, `B` = k in qkv, `C` in d_qkv).
    pub fn head_queries_gradient(&self, s: usize, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        HeadProduct {
            product: RowMajor { transpose: (false, false), dims: (t, hd, t), ld: (t, 3 * d, 3 * d) },
            a: self.scores_of(s, h),
            b: self.at(s, 3 * d, d + h * hd),
            c: self.at(s, 3 * d, h * hd),
        }
    }

    /// Backward: the keys' gradient `dk = dSᵀ·q` (`A` in ds, `B` = q in qkv, `C` in d_qkv).
    pub fn head_keys_gradient(&self, s: usize, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        HeadProduct {
            product: RowMajor { transpose: (true, false), dims: (t, hd, t), ld: (t, 3 * d, 3 * d) },
            a: self.scores_of(s, h),
            b: self.at(s, 3 * d, h * hd),
            c: self.at(s, 3 * d, d + h * hd),
        }
    }
}
