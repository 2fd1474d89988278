//! A row-major `f32` matrix: `rows` samples by `cols` features. Every activation and gradient in
//! a model is one of these; buffers are reused across steps (resizing keeps the allocation).

/// Row-major `rows x cols` matrix of `f32`.
#[derive(Debug, Default, PartialEq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
}

impl Clone for Matrix {
    fn clone(&self) -> Self {
        Matrix { rows: self.rows, cols: self.cols, data: self.data.clone() }
    }

    /// Reuses this matrix's allocation (the derived one would allocate anew): the generated
    /// forward copies each step's input this way.
    fn clone_from(&mut self, source: &Self) {
        self.rows = source.rows;
        self.cols = source.cols;
        self.data.clone_from(&source.data);
    }
}

impl Matrix {
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Matrix { rows, cols, data: vec![0.0; rows * cols] }
    }

    /// Wraps `data` (row-major); panics if the length is not `rows * cols`, a caller bug.
    pub fn from_vec(rows: usize, cols: usize, data: Vec<f32>) -> Self {
        assert_eq!(data.len(), rows * cols, "Matrix::from_vec: {rows}x{cols} needs {} values", rows * cols);
        Matrix { rows, cols, data }
    }

    /// Makes this a `rows x cols` matrix, reusing the allocation when it is large enough.
    /// Contents are unspecified afterwards: callers overwrite every element.
    pub fn resize(&mut self, rows: usize, cols: usize) {
        self.rows = rows;
        self.cols = cols;
        self.data.resize(rows * cols, 0.0);
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.data
    }

    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    pub fn row_mut(&mut self, r: usize) -> &mut [f32] {
        &mut self.data[r * self.cols..(r + 1) * self.cols]
    }

    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }

    /// `self = a + b`, element by element (resized to their shape): a residual connection's
    /// output, `f(x) + x`.
    pub fn set_sum(&mut self, a: &Matrix, b: &Matrix) {
        assert_eq!((a.rows, a.cols), (b.rows, b.cols), "a residual sum needs equal shapes");
        self.resize(a.rows, a.cols);
        for ((s, x), y) in self.data.iter_mut().zip(&a.data).zip(&b.data) {
            *s = x + y;
        }
    }

    /// `self += other`, element by element: a residual connection's skip gradient, added to the
    /// gradient its block's first layer computed for the block's input.
    pub fn add_assign(&mut self, other: &Matrix) {
        assert_eq!((self.rows, self.cols), (other.rows, other.cols), "a skip gradient needs equal shapes");
        self.data.iter_mut().zip(&other.data).for_each(|(s, x)| *s += x);
    }
}
