//! The kernels of a language model's sequences: token and position embeddings, attention's
//! causal softmax, and the loss over the vocabulary.

use crate::arguments::{holds, int};
use crate::launch_shapes::Shape;
use crate::{ffi, token_rows};

/// Panics unless every id is an integral float naming a row of a table of `table_rows`.
fn check_ids(ids: &[f32], table_rows: usize) {
    for (r, &id) in ids.iter().enumerate() {
        assert!(
            id >= 0.0 && id.fract() == 0.0 && (id as usize) < table_rows,
            "id {id} of row {r} is not a row of the table"
        );
    }
}

/// `y[r] = w[ids[r]]`, rows of width `d`.
pub fn embedding_forward(shape: Shape, y: &mut [f32], ids: &[f32], w: &[f32], d: usize) {
    check_ids(ids, w.len() / d);
    holds(y, ids.len() * d, "y");
    // SAFETY: writes rows x d of y and reads the rows of w the ids name, which exist (checked).
    unsafe {
        ffi::emu_embedding_forward(
            shape.grid,
            shape.block,
            y.as_mut_ptr(),
            ids.as_ptr(),
            w.as_ptr(),
            int(ids.len()),
            int(d),
        )
    }
}

/// `dw[ids[r]] += dy[r]`, each token's rows added in their order: the ids grouped by token
/// first, as the backend groups a batch's (`token_rows`).
pub fn embedding_backward(shape: Shape, dw: &mut [f32], ids: &[f32], dy: &[f32], d: usize) {
    let vocab = dw.len() / d;
    check_ids(ids, vocab);
    holds(dy, ids.len() * d, "dy");
    let mut grouped = token_rows::TokenRows::default();
    grouped.group(ids, vocab);
    // SAFETY: the table holds `rows + 2 * groups + 1` entries: rows of dy, which holds rows x d
    // gradients, and tokens whose rows of dw exist (checked).
    unsafe {
        ffi::emu_embedding_backward(
            shape.grid,
            shape.block,
            dw.as_mut_ptr(),
            grouped.table().as_ptr(),
            int(grouped.rows()),
            int(grouped.groups()),
            dy.as_ptr(),
            int(d),
        )
    }
}

/// `y[r] = x[r] + w[r mod positions]`, rows of width `d`.
pub fn position_forward(shape: Shape, y: &mut [f32], x: &[f32], w: &[f32], (positions, d): (usize, usize)) {
    let rows = x.len() / d;
    holds(y, rows * d, "y");
    holds(w, positions * d, "w");
    // SAFETY: touches rows x d of y and x, positions x d of w, which they hold.
    unsafe {
        ffi::emu_position_forward(
            shape.grid,
            shape.block,
            y.as_mut_ptr(),
            x.as_ptr(),
            w.as_ptr(),
            int(rows),
            int(positions),
            int(d),
        )
    }
}

/// `dw[t] (+)= Σ_s dy[s, t]` over `sequences` sequences of `positions` rows of width `d`.
pub fn position_backward(
    shape: Shape,
    dw: &mut [f32],
    dy: &[f32],
    (sequences, positions, d): (usize, usize, usize),
    accumulate: bool,
) {
    holds(dw, positions * d, "dw");
    holds(dy, sequences * positions * d, "dy");
    let add = i32::from(accumulate);
    // SAFETY: reads sequences x positions x d of dy and writes positions x d of dw, which they hold.
    unsafe {
        ffi::emu_position_backward(
            shape.grid,
            shape.block,
            dw.as_mut_ptr(),
            dy.as_ptr(),
            int(sequences),
            int(positions),
            int(d),
            add,
        )
    }
}

/// Row `r` of `[rows, t]` scores becomes the causal softmax of `scale ×` its entries.
pub fn causal_softmax(shape: Shape, p: &mut [f32], (rows, t): (usize, usize), scale: f32) {
    holds(p, rows * t, "p");
    // SAFETY: touches rows x t of p, which it holds.
    unsafe { ffi::emu_causal_softmax(shape.grid, shape.block, p.as_mut_ptr(), int(rows), int(t), scale) }
}

/// The scores' gradient from the weights' (`ds`, overwritten) and the weights `p`.
pub fn causal_softmax_backward(shape: Shape, ds: &mut [f32], p: &[f32], (rows, t): (usize, usize), scale: f32) {
    holds(ds, rows * t, "ds");
    holds(p, rows * t, "p");
    // SAFETY: touches rows x t of ds and p, which they hold.
    unsafe {
        ffi::emu_causal_softmax_backward(shape.grid, shape.block, ds.as_mut_ptr(), p.as_ptr(), int(rows), int(t), scale)
    }
}

/// Softmax cross-entropy of `[labels.len(), classes]` logits: each row's loss, and the mean
/// loss's gradient.
pub fn softmax_cross_entropy(
    shape: Shape,
    (loss, dlogits): (&mut [f32], &mut [f32]),
    logits: &[f32],
    labels: &[u32],
    classes: usize,
) {
    let rows = labels.len();
    assert!(labels.iter().all(|&l| (l as usize) < classes), "a label is not below {classes}");
    holds(loss, rows, "loss");
    holds(dlogits, rows * classes, "dlogits");
    holds(logits, rows * classes, "logits");
    // SAFETY: touches rows of loss and labels and rows x classes of the logits and their
    // gradient, which they hold; every label indexes a class (checked).
    unsafe {
        ffi::emu_softmax_cross_entropy(
            shape.grid,
            shape.block,
            loss.as_mut_ptr(),
            dlogits.as_mut_ptr(),
            logits.as_ptr(),
            labels.as_ptr(),
            int(rows),
            int(classes),
        )
    }
}
