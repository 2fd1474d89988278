//! A batch's rows grouped by token id, on the host, for the embedding's backward on the GPU:
//! with the rows of each token in one place, one block adds them up in the order of the rows,
//! as the CPU does, instead of threads racing to add into a shared row with atomics (whose order
//! changes from run to run, and with it the last bits of every embedding gradient: a resumed run
//! would no longer repeat an uninterrupted one). Plain arithmetic, shared with the kernels' CPU
//! emulation (`tests/kernel-emulation` includes this file).

/// One table the kernel reads: the rows sorted by token, each token's in increasing order; then
/// where each token's rows start in that order (one entry per token of the batch, and the row
/// count last); then those tokens. Its buffers are kept from batch to batch.
#[derive(Debug, Default)]
pub struct TokenRows {
    /// Per vocabulary entry: its count of rows, then where its next row goes.
    cursor: Vec<u32>,
    table: Vec<i32>,
    rows: usize,
    groups: usize,
}

impl TokenRows {
    /// Groups the rows of `ids` (integral floats below `vocab`, checked by the caller; fewer than
    /// 2^31 of them, as every GPU tensor) by token: a counting sort, stable.
    pub fn group(&mut self, ids: &[f32], vocab: usize) {
        let as_int = |n: usize| i32::try_from(n).expect("a batch's rows fit the kernels' int");
        self.cursor.clear();
        self.cursor.resize(vocab, 0);
        for &id in ids {
            self.cursor[id as usize] += 1;
        }
        let rows = ids.len();
        let groups = self.cursor.iter().filter(|&&count| count > 0).count();
        self.table.clear();
        self.table.resize(rows + 2 * groups + 1, 0);
        let (order, rest) = self.table.split_at_mut(rows);
        let (starts, tokens) = rest.split_at_mut(groups + 1);
        let (mut at, mut group) = (0, 0);
        for (token, cursor) in self.cursor.iter_mut().enumerate() {
            if *cursor > 0 {
                (starts[group], tokens[group]) = (as_int(at), as_int(token));
                group += 1;
                at += *cursor as usize;
                *cursor = (at - *cursor as usize) as u32;
            }
        }
        starts[groups] = as_int(rows);
        for (row, &id) in ids.iter().enumerate() {
            let cursor = &mut self.cursor[id as usize];
            order[*cursor as usize] = as_int(row);
            *cursor += 1;
        }
        (self.rows, self.groups) = (rows, groups);
    }

    /// Becomes a copy of `from`, in the buffers this already holds.
    pub fn clone_from(&mut self, from: &TokenRows) {
        self.table.clone_from(&from.table);
        (self.rows, self.groups) = (from.rows, from.groups);
    }

    /// The table, as the kernel reads it (`rows + 2 * groups + 1` entries).
    pub fn table(&self) -> &[i32] {
        &self.table
    }

    /// The rows last grouped.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The distinct tokens among them.
    pub fn groups(&self) -> usize {
        self.groups
    }
}

#[cfg(test)]
mod tests {
    use super::TokenRows;

    #[test]
    fn rows_are_grouped_by_token_in_their_own_order() {
        let mut rows = TokenRows::default();
        rows.group(&[3.0, 1.0, 3.0, 0.0, 3.0, 1.0], 5);
        assert_eq!((rows.rows(), rows.groups()), (6, 3));
        // Rows by token (0: row 3; 1: rows 1, 5; 3: rows 0, 2, 4), starts, tokens.
        assert_eq!(rows.table(), [3, 1, 5, 0, 2, 4, 0, 1, 3, 6, 0, 1, 3]);
        // The buffers are reused, and nothing of the longer batch before is left.
        rows.group(&[2.0, 2.0], 5);
        assert_eq!(rows.table(), [0, 1, 0, 2, 2]);
        rows.group(&[], 5);
        assert_eq!((rows.table(), rows.groups()), (&[0][..], 0));
    }
}
