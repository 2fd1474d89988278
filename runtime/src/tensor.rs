//! A row-major `f32` matrix: `rows` samples by `cols` features. Every activation and gradient in
//! a model is one of these; buffers are reused across steps (resizing keeps the allocation).

/// Row-major `rows x cols` matrix of `f32`.
#[derive(Debug, Default)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    /// The first `rows * cols` values are the matrix; any after them are left from a larger
    /// shape, so that a buffer shared by tensors of several shapes (backward's gradient
    /// buffers) changes shape without clearing memory.
    data: Vec<f32>,
}

impl PartialEq for Matrix {
    fn eq(&self, other: &Self) -> bool {
        (self.rows, self.cols) == (other.rows, other.cols) && self.as_slice() == other.as_slice()
    }
}

impl Clone for Matrix {
    fn clone(&self) -> Self {
        Matrix { rows: self.rows, cols: self.cols, data: self.as_slice().to_vec() }
    }

    /// Reuses this matrix's allocation (the derived one would allocate anew): the generated
    /// forward copies each step's input this way.
    fn clone_from(&mut self, source: &Self) {
        self.resize(source.rows, source.cols);
        self.as_mut_slice().copy_from_slice(source.as_slice());
    }
}

impl Matrix {
    /// A `rows` x `cols` matrix of zeros.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Matrix { rows, cols, data: vec![0.0; rows * cols] }
    }

    /// Wraps `data` (row-major); panics if the length is not `rows * cols`, a caller bug.
    pub fn from_vec(rows: usize, cols: usize, data: Vec<f32>) -> Self {
        assert_eq!(data.len(), rows * cols, "Matrix::from_vec: {rows}x{cols} needs {} values", rows * cols);
        Matrix { rows, cols, data }
    }

    /// Makes this a `rows x cols` matrix, reusing the allocation when it is large enough (and
    /// then writing no memory). Contents are unspecified afterwards: callers overwrite every
    /// element.
    pub fn resize(&mut self, rows: usize, cols: usize) {
        self.rows = rows;
        self.cols = cols;
        if self.data.len() < rows * cols {
            self.data.resize(rows * cols, 0.0);
        }
    }

    /// Rows: samples, or tokens of a batch of sequences.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns: features per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The values, row after row.
    pub fn as_slice(&self) -> &[f32] {
        &self.data[..self.rows * self.cols]
    }

    /// The values, row after row, to write.
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.data[..self.rows * self.cols]
    }

    /// Row `r` (panics past the last).
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// Row `r`, to write (panics past the last).
    pub fn row_mut(&mut self, r: usize) -> &mut [f32] {
        &mut self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// The values, row after row, as a vector.
    pub fn into_vec(self) -> Vec<f32> {
        let mut data = self.data;
        data.truncate(self.rows * self.cols);
        data
    }

    /// `self = a + b`, element by element (resized to their shape): a residual connection's
    /// output, `f(x) + x`.
    pub fn set_sum(&mut self, a: &Matrix, b: &Matrix) {
        assert_eq!((a.rows, a.cols), (b.rows, b.cols), "a residual sum needs equal shapes");
        self.resize(a.rows, a.cols);
        for ((s, x), y) in self.as_mut_slice().iter_mut().zip(a.as_slice()).zip(b.as_slice()) {
            *s = x + y;
        }
    }

    /// `self += other`, element by element: a residual connection's skip gradient, added to the
    /// gradient its block's first layer computed for the block's input.
    pub fn add_assign(&mut self, other: &Matrix) {
        assert_eq!((self.rows, self.cols), (other.rows, other.cols), "a skip gradient needs equal shapes");
        self.as_mut_slice().iter_mut().zip(other.as_slice()).for_each(|(s, x)| *s += x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_change_within_the_allocation_keeps_it_and_only_the_shape_is_seen() {
        let mut m = Matrix::from_vec(2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let at = m.as_slice().as_ptr();
        m.resize(1, 2);
        assert_eq!(m.as_slice(), &[1.0, 2.0]);
        assert_eq!(m, Matrix::from_vec(1, 2, vec![1.0, 2.0]), "leftovers are not compared");
        assert_eq!(m.clone().into_vec(), vec![1.0, 2.0]);
        assert_eq!(m.clone().as_slice().len(), 2);
        m.resize(3, 2);
        assert_eq!((m.as_slice().as_ptr(), m.as_slice().len()), (at, 6), "no new allocation");
        m.resize(4, 2);
        assert_eq!(m.as_slice().len(), 8);
        let mut copy = Matrix::default();
        copy.clone_from(&Matrix::from_vec(1, 1, vec![7.0]));
        assert_eq!(copy, Matrix::from_vec(1, 1, vec![7.0]));
    }
}
