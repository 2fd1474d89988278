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

/// The products of one head over every sequence, one cuBLAS strided-batched call: sequence `s`'s
/// `A`, `B` and `C` start at `a + s·stride.0`, `b + s·stride.1` and `c + s·stride.2` in their
/// buffers (each function names them). One call per head rather than per (sequence, head): at
/// nanoGPT's batch of 12 that is 12 times fewer launches, which the GPU's step is bound by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadProduct {
    pub product: RowMajor,
    pub a: usize,
    pub b: usize,
    pub c: usize,
    pub sequences: usize,
    pub stride: (usize, usize, usize),
}

impl HeadProduct {
    /// Elements `A`, `B` and `C` must hold from their offsets: the last sequence's product's.
    pub fn needs_elements(&self) -> (usize, usize, usize) {
        let (a, b, c) = self.product.needs_elements();
        let last = self.sequences.saturating_sub(1);
        let (sa, sb, sc) = self.stride;
        (a + last * sa, b + last * sb, c + last * sc)
    }
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

    /// Offset of head `h`'s `[t, t]` scores in the first sequence's.
    fn scores_of(&self, h: usize) -> usize {
        h * self.t * self.t
    }

    /// One head's product over every sequence, its operands `(A, B, C)` in buffers whose
    /// sequences are `strides` apart.
    fn batched(
        &self,
        product: RowMajor,
        (a, b, c): (usize, usize, usize),
        stride: (usize, usize, usize),
    ) -> HeadProduct {
        HeadProduct { product, a, b, c, sequences: self.sequences, stride }
    }

    /// Elements between two sequences' starts in qkv `[rows, 3·width]`, in heads
    /// `[rows, width]` and in the scores `[sequences, heads, t, t]`.
    fn strides(&self) -> (usize, usize, usize) {
        (self.t * 3 * self.width, self.t * self.width, self.heads * self.t * self.t)
    }

    /// Forward: the scores `q·kᵀ` (`A` = q and `B` = k in qkv, `C` in probs).
    pub fn head_scores(&self, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        let (qkv, _, scores) = self.strides();
        let product = RowMajor { transpose: (false, true), dims: (t, t, hd), ld: (3 * d, 3 * d, t) };
        self.batched(product, (h * hd, d + h * hd, self.scores_of(h)), (qkv, qkv, scores))
    }

    /// Forward: the head's output `P·v` (`A` in probs, `B` = v in qkv, `C` in heads).
    pub fn head_values(&self, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        let (qkv, heads, scores) = self.strides();
        let product = RowMajor { transpose: (false, false), dims: (t, hd, t), ld: (t, 3 * d, d) };
        self.batched(product, (self.scores_of(h), 2 * d + h * hd, h * hd), (scores, qkv, heads))
    }

    /// Backward: the weights' gradient `dP = dy_h·vᵀ` (`A` in d_heads, `B` = v in qkv, `C` in ds).
    pub fn head_weights_gradient(&self, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        let (qkv, heads, scores) = self.strides();
        let product = RowMajor { transpose: (false, true), dims: (t, t, hd), ld: (d, 3 * d, t) };
        self.batched(product, (h * hd, 2 * d + h * hd, self.scores_of(h)), (heads, qkv, scores))
    }

    /// Backward: the values' gradient `dv = Pᵀ·dy_h` (`A` in probs, `B` in d_heads, `C` in d_qkv).
    pub fn head_values_gradient(&self, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        let (qkv, heads, scores) = self.strides();
        let product = RowMajor { transpose: (true, false), dims: (t, hd, t), ld: (t, d, 3 * d) };
        self.batched(product, (self.scores_of(h), h * hd, 2 * d + h * hd), (scores, heads, qkv))
    }

    /// Backward: the queries' gradient `dq = dS·k` (`A` in ds, `B` = k in qkv, `C` in d_qkv).
    pub fn head_queries_gradient(&self, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        let (qkv, _, scores) = self.strides();
        let product = RowMajor { transpose: (false, false), dims: (t, hd, t), ld: (t, 3 * d, 3 * d) };
        self.batched(product, (self.scores_of(h), d + h * hd, h * hd), (scores, qkv, qkv))
    }

    /// Backward: the keys' gradient `dk = dSᵀ·q` (`A` in ds, `B` = q in qkv, `C` in d_qkv).
    pub fn head_keys_gradient(&self, h: usize) -> HeadProduct {
        let (d, t, hd) = (self.width, self.t, self.head());
        let (qkv, _, scores) = self.strides();
        let product = RowMajor { transpose: (true, false), dims: (t, hd, t), ld: (t, 3 * d, 3 * d) };
        self.batched(product, (self.scores_of(h), h * hd, d + h * hd), (scores, qkv, qkv))
    }
}
