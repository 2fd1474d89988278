//! What every layer call knows about the batch besides its matrix: how its rows group into
//! sequences. A per-token layer (`Linear`, `LayerNorm`, the activations) treats every row alone
//! and ignores it; a layer that mixes positions within a sequence (attention) reads it, and
//! never mixes rows of different sequences. It also carries the micro-step's dropout, which
//! `Dropout` and attention (on its weights) read.

use super::dropout_draw::DropoutDraw;

/// The shape of one forward and backward: `sequences × positions` rows, sequence-major (row
/// `s * positions + t` is position `t` of sequence `s`). A batch of independent samples is
/// `rows(n)`: `n` sequences of one position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StepContext {
    sequences: usize,
    positions: usize,
    dropout: DropoutDraw,
}

impl StepContext {
    /// `rows` independent samples.
    pub const fn rows(rows: usize) -> Self {
        StepContext { sequences: rows, positions: 1, dropout: DropoutDraw::NONE }
    }

    /// `sequences` sequences of `positions` positions each; `positions` is at least 1.
    pub const fn sequences(sequences: usize, positions: usize) -> Self {
        assert!(positions > 0, "a sequence has at least one position");
        StepContext { sequences, positions, dropout: DropoutDraw::NONE }
    }

    /// Sequences in the batch (its row count, for independent samples).
    pub const fn sequence_count(&self) -> usize {
        self.sequences
    }

    /// Positions per sequence (1 for independent samples).
    pub const fn positions(&self) -> usize {
        self.positions
    }

    /// Rows of every activation matrix: `sequences × positions`.
    pub const fn row_count(&self) -> usize {
        self.sequences * self.positions
    }

    /// The rows of sequence `s`.
    pub const fn sequence_rows(&self, s: usize) -> std::ops::Range<usize> {
        s * self.positions..(s + 1) * self.positions
    }

    /// The same batch, trained with `dropout` (the `Trainer` sets it on training micro-steps
    /// only: without it, the context drops nothing).
    pub const fn with_dropout(self, dropout: DropoutDraw) -> Self {
        StepContext { dropout, ..self }
    }

    /// What a `Dropout` layer drops: its draw once `for_layer` has keyed it to the layer.
    pub const fn dropout(&self) -> DropoutDraw {
        self.dropout
    }

    /// The context as layer `index` (in definition order) sees it: its own dropout mask. The
    /// generated program's layer calls go through it on every device.
    pub const fn for_layer(&self, index: usize) -> Self {
        StepContext { dropout: self.dropout.for_layer(index), ..*self }
    }
}

impl Default for StepContext {
    /// No rows yet.
    fn default() -> Self {
        StepContext::rows(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_group_sequence_major() {
        let ctx = StepContext::sequences(3, 4);
        assert_eq!((ctx.sequence_count(), ctx.positions(), ctx.row_count()), (3, 4, 12));
        assert_eq!(ctx.sequence_rows(1), 4..8);
        assert_eq!(StepContext::rows(5), StepContext::sequences(5, 1));
        assert_eq!(StepContext::default().row_count(), 0);
    }
}
