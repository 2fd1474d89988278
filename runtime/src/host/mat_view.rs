//! Strided views of a slice as matrices, for the products (`gemm`): every view in existence
//! addresses only elements inside its slice, which the products rely on to call BLAS soundly, so
//! every constructor checks its bounds, in arithmetic that cannot wrap.

/// Read-only `rows x cols` view into a slice with arbitrary non-negative strides.
///
/// Fields are private so that every view in existence addresses only elements inside `data`;
/// [`gemm`](super::gemm::gemm) relies on that to call the unsafe kernel soundly.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    pub(super) data: &'a [f32],
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) row_stride: isize,
    pub(super) col_stride: isize,
}

impl<'a> MatRef<'a> {
    /// Views `data` as a row-major `rows x cols` matrix; panics if the length is not
    /// `rows * cols` (a caller bug).
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        check_dense(data.len(), rows, cols, "MatRef::row_major");
        // Slices never exceed isize::MAX bytes, so these strides fit.
        MatRef { data, rows, cols, row_stride: cols as isize, col_stride: 1 }
    }

    /// Views `rows x cols` elements of a larger row-major matrix whose rows are `row_stride`
    /// apart, from element `at` (one head's columns of a `[tokens, 3D]` projection, say): the
    /// library reads them in place, with no copy into a dense buffer. Panics if the block is not
    /// inside `data` or the rows overlap (caller bugs).
    pub fn block(data: &'a [f32], at: usize, rows: usize, cols: usize, row_stride: usize) -> Self {
        let data = &data[block_span(data.len(), at, rows, cols, row_stride, "MatRef::block")];
        MatRef { data, rows, cols, row_stride: row_stride as isize, col_stride: 1 }
    }

    /// The transpose, as a view of the same data (strides swapped, nothing copied).
    pub fn t(self) -> Self {
        MatRef {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }
}

/// The output of a product: `rows x cols` elements of a row-major matrix whose rows are
/// `row_stride` apart, written in place (one head's columns of the attention's outputs).
#[derive(Debug)]
pub struct MatMut<'a> {
    pub(super) data: &'a mut [f32],
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) row_stride: usize,
}

impl<'a> MatMut<'a> {
    /// All of `data` as a dense row-major `rows x cols` matrix; panics if the length differs.
    pub fn row_major(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        check_dense(data.len(), rows, cols, "MatMut::row_major");
        MatMut { data, rows, cols, row_stride: cols }
    }

    /// `rows x cols` elements from element `at`, rows `row_stride` apart (see [`MatRef::block`]).
    pub fn block(data: &'a mut [f32], at: usize, rows: usize, cols: usize, row_stride: usize) -> Self {
        let span = block_span(data.len(), at, rows, cols, row_stride, "MatMut::block");
        MatMut { data: &mut data[span], rows, cols, row_stride }
    }
}

/// The elements a block of `rows x cols` from `at` with rows `row_stride` apart spans, checked
/// to lie inside a slice of `len` with rows that do not overlap.
fn block_span(
    len: usize,
    at: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    what: &str,
) -> std::ops::Range<usize> {
    assert!(row_stride >= cols, "{what}: rows of {cols} values cannot be {row_stride} apart");
    // The strides go to BLAS as signed integers, and the end is checked: arithmetic that wraps
    // would pass for a block inside the slice.
    assert!(isize::try_from(row_stride).is_ok(), "{what}: rows {row_stride} apart");
    let end = if rows == 0 || cols == 0 {
        Some(at)
    } else {
        (rows - 1).checked_mul(row_stride).and_then(|last| last.checked_add(at)?.checked_add(cols))
    };
    match end {
        Some(end) if end <= len => at..end,
        _ => panic!("{what}: {rows}x{cols} from {at}, rows {row_stride} apart, ends at {}, past {len}", shown(end)),
    }
}

/// Panics unless a dense `rows x cols` matrix has `len` values. Checked: a product that wraps
/// would pass for a short slice's length.
fn check_dense(len: usize, rows: usize, cols: usize, what: &str) {
    let needs = rows.checked_mul(cols);
    assert!(needs == Some(len), "{what}: {rows}x{cols} needs {} values, got {len}", shown(needs));
}

/// An element count in a message, where `None` is one past what `usize` holds.
fn shown(count: Option<usize>) -> String {
    count.map_or_else(|| "more than usize::MAX".into(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "MatRef::block: 2x3 from 4, rows 5 apart, ends at 12, past 11")]
    fn rejects_a_block_past_the_end() {
        MatRef::block(&[0.0; 11], 4, 2, 3, 5);
    }

    #[test]
    #[should_panic(
        expected = "MatRef::block: 5x1 from 0, rows 4611686018427387904 apart, ends at more than usize::MAX"
    )]
    fn rejects_a_block_whose_end_wraps() {
        // (5 - 1) * 2^62 + 1 wraps to 1 in unchecked arithmetic, which fits any slice.
        MatRef::block(&[0.0; 4], 0, 5, 1, 1 << 62);
    }

    #[test]
    #[should_panic(expected = "MatRef::row_major: 4294967296x4294967296 needs more than usize::MAX values, got 0")]
    fn rejects_dimensions_whose_product_wraps() {
        // 2^32 * 2^32 wraps to 0 in unchecked arithmetic: the length of an empty slice.
        MatRef::row_major(&[], 1 << 32, 1 << 32);
    }

    #[test]
    #[should_panic(expected = "MatMut::block: rows of 3 values cannot be 2 apart")]
    fn rejects_overlapping_rows() {
        MatMut::block(&mut [0.0; 12], 0, 2, 3, 2);
    }

    #[test]
    fn transpose_swaps_shape() {
        let data = [0.0; 6];
        let v = MatRef::row_major(&data, 2, 3).t();
        assert_eq!((v.rows, v.cols), (3, 2));
    }

    #[test]
    #[should_panic(expected = "MatRef::row_major: 2x3 needs 6 values, got 5")]
    fn rejects_short_view() {
        MatRef::row_major(&[0.0; 5], 2, 3);
    }
}
