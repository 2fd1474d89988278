//! Every layer kernel of the GPU backend, run on the CPU in the grids the backend launches it
//! with, against the CPU layer it stands for (or, for the softmax and the bias, the defining
//! formula in f64). Sizes straddle the block size, so that rows wider than a block and grids
//! that loop over their elements are both exercised.

mod common;

use common::{assert_close, values};
use kernel_emulation::launch_shapes::{column_tiles, elementwise, per_row, THREADS};
use kernel_emulation::{self as emu, Activation, RowStats, Shape};
use overlap_runtime::{
    CrossEntropyLoss, Dropout, Embedding, Gelu, Layer, LayerNorm, Matrix, PositionEmbedding, Relu, Sigmoid,
    StepContext, Tanh,
};

/// A grid too small for its elements: every thread loops (the backend's grids are capped).
const LOOPING: Shape = Shape { grid: 2, block: THREADS };

fn cpu_activation<L: Layer<Saved = ()>>(layer: L, x: &Matrix, dy: &Matrix) -> (Vec<f32>, Vec<f32>) {
    let ctx = StepContext::rows(x.rows());
    let (mut y, mut dx) = (Matrix::default(), Matrix::default());
    layer.forward(&ctx, x, &mut y, &mut ());
    layer.backward(&ctx, x, &y, &(), dy, &mut [], false, Some(&mut dx));
    (y.into_vec(), dx.into_vec())
}

#[test]
fn element_wise_layers_match_the_cpu_layers() {
    let (rows, cols) = (3, 517);
    let x = Matrix::from_vec(rows, cols, values(rows * cols, 1, 2.0));
    let dy = Matrix::from_vec(rows, cols, values(rows * cols, 2, 2.0));
    let n = rows * cols;
    for (f, tol) in
        [(Activation::Relu, 0.0), (Activation::Gelu, 2e-6), (Activation::Tanh, 2e-6), (Activation::Sigmoid, 2e-6)]
    {
        let (want_y, want_dx) = match f {
            Activation::Relu => cpu_activation(Relu, &x, &dy),
            Activation::Gelu => cpu_activation(Gelu, &x, &dy),
            Activation::Tanh => cpu_activation(Tanh, &x, &dy),
            Activation::Sigmoid => cpu_activation(Sigmoid, &x, &dy),
        };
        for shape in [elementwise(n), LOOPING] {
            let at = format!("{f:?} in {shape:?}");
            let mut y = vec![f32::NAN; n];
            emu::activation_forward(shape, f, &mut y, x.as_slice());
            assert_close(&y, &want_y, tol, &format!("{at} forward"));
            let mut dx = vec![f32::NAN; n];
            let saved = if f.backward_reads_output() { &y } else { x.as_slice() };
            emu::activation_backward(shape, f, &mut dx, saved, dy.as_slice());
            assert_close(&dx, &want_dx, tol, &format!("{at} backward"));
        }
    }
}

#[test]
fn dropout_draws_the_cpu_layers_mask_bit_for_bit() {
    // Rows far into the run (row keys with high bits set), a wide row, and every rate's extremes.
    let (rows, cols) = (5, 1031);
    let x = Matrix::from_vec(rows, cols, values(rows * cols, 8, 2.0));
    let dy = Matrix::from_vec(rows, cols, values(rows * cols, 9, 2.0));
    for (rate, first_row) in [(0.1f32, 0u64), (0.5, 3 << 40), (0.9, 12_345)] {
        let draw = overlap_runtime::DropoutDraw::new(rate, 1337, first_row).for_layer(7);
        let ctx = StepContext::rows(rows).with_dropout(draw);
        let (mut want_y, mut want_dx) = (Matrix::default(), Matrix::default());
        Dropout.forward(&ctx, &x, &mut want_y, &mut ());
        Dropout.backward(&ctx, &x, &want_y, &(), &dy, &mut [], false, Some(&mut want_dx));
        assert!(want_y.as_slice().contains(&0.0), "rate {rate} dropped nothing");
        for shape in [elementwise(rows * cols), LOOPING] {
            let mut y = vec![f32::NAN; rows * cols];
            emu::dropout(shape, &mut y, x.as_slice(), rows, draw);
            assert_eq!(y, want_y.as_slice(), "rate {rate} forward in {shape:?}");
            let mut dx = vec![f32::NAN; rows * cols];
            emu::dropout(shape, &mut dx, dy.as_slice(), rows, draw);
            assert_eq!(dx, want_dx.as_slice(), "rate {rate} backward in {shape:?}");
            let mut in_place = dy.as_slice().to_vec();
            emu::dropout_in_place(shape, &mut in_place, rows, draw);
            assert_eq!(in_place, want_dx.as_slice(), "rate {rate} in place in {shape:?}");
        }
    }
}

#[test]
fn bias_and_residual_kernels_add_what_they_say() {
    let (rows, cols) = (37, 300);
    let (y0, bias, dy) = (values(rows * cols, 3, 2.0), values(cols, 4, 2.0), values(rows * cols, 5, 2.0));
    for shape in [elementwise(rows * cols), LOOPING] {
        let mut y = y0.clone();
        emu::bias_add_rows(shape, &mut y, &bias, rows);
        let want: Vec<f32> = y0.iter().enumerate().map(|(i, v)| v + bias[i % cols]).collect();
        assert_eq!(y, want, "bias_add_rows in {shape:?}");
    }
    let column_sums: Vec<f32> =
        (0..cols).map(|c| (0..rows).map(|r| f64::from(dy[r * cols + c])).sum::<f64>() as f32).collect();
    // Tiles of columns as the backend launches them; one block for every tile; blocks of 2 lanes.
    for shape in [column_tiles(cols), Shape { grid: 1, block: THREADS }, Shape { grid: 3, block: 64 }] {
        let mut dbias = vec![f32::NAN; cols];
        emu::bias_grad(shape, &mut dbias, &dy, rows, false);
        assert_close(&dbias, &column_sums, 1e-5, "bias_grad");
        emu::bias_grad(shape, &mut dbias, &dy, rows, true);
        let twice: Vec<f32> = column_sums.iter().map(|s| 2.0 * s).collect();
        assert_close(&dbias, &twice, 1e-5, "bias_grad, accumulating");
    }
    let (a, b) = (values(1000, 6, 2.0), values(1000, 7, 2.0));
    let mut y = vec![f32::NAN; 1000];
    emu::add(elementwise(1000), &mut y, &a, &b);
    assert_eq!(y, a.iter().zip(&b).map(|(a, b)| a + b).collect::<Vec<_>>(), "add");
    emu::add_into(LOOPING, &mut y, &a);
    assert_eq!(y, a.iter().zip(&b).map(|(a, b)| a + b + a).collect::<Vec<_>>(), "add_into");
}

#[test]
fn embeddings_match_the_cpu_layers_with_repeated_tokens() {
    const V: usize = 11;
    const D: usize = 37;
    let rows = 50;
    let table = Embedding::<V, D> { weight: values(V * D, 8, 2.0) };
    // Every token comes back several times: their gradients meet in one row.
    let ids = Matrix::from_vec(rows, 1, (0..rows).map(|r| ((r * 7) % V) as f32).collect());
    let ctx = StepContext::rows(rows);
    // Gradients of rows at different scales, so that adding a token's rows in another order
    // rounds otherwise (uniform draws alone lie on one grid, where every order sums exactly).
    let scaled =
        values(rows * D, 9, 2.0).into_iter().enumerate().map(|(i, v)| v / 3.0 * 1.37f32.powi((i / D % 9) as i32));
    let (mut want_y, dy) = (Matrix::default(), Matrix::from_vec(rows, D, scaled.collect()));
    table.forward(&ctx, &ids, &mut want_y, &mut ());
    let mut want_dw = vec![0.0; V * D];
    table.backward(&ctx, &ids, &want_y, &(), &dy, &mut [&mut want_dw], false, None);
    for shape in [elementwise(rows * D), LOOPING] {
        let mut y = vec![f32::NAN; rows * D];
        emu::embedding_forward(shape, &mut y, ids.as_slice(), &table.weight, D);
        assert_eq!(y, want_y.as_slice(), "embedding_forward in {shape:?}");
    }
    // One block per token of the batch (all V of them here), as the backend launches it, and
    // fewer blocks than tokens.
    for shape in [per_row(V), LOOPING] {
        // The backend clears the table's gradient first when not accumulating.
        let mut dw = vec![0.0; V * D];
        emu::embedding_backward(shape, &mut dw, ids.as_slice(), dy.as_slice(), D);
        // Each token's rows are added in the CPU's order: the same bits, whichever order the
        // GPU runs the blocks in (atomics added rows in the blocks' order).
        assert_eq!(dw, want_dw, "embedding_backward in {shape:?}");
        let mut dw = vec![0.0; V * D];
        emu::with_blocks_last_first(|| emu::embedding_backward(shape, &mut dw, ids.as_slice(), dy.as_slice(), D));
        assert_eq!(dw, want_dw, "embedding_backward in {shape:?}, blocks last to first");
    }

    // Positions: 3 sequences of 10 positions, a table of 16 (rows past 10 get no gradient).
    const T: usize = 16;
    let (sequences, positions) = (3, 10);
    let rows = sequences * positions;
    let wpe = PositionEmbedding::<T, D> { weight: values(T * D, 10, 2.0) };
    let ctx = StepContext::sequences(sequences, positions);
    let x = Matrix::from_vec(rows, D, values(rows * D, 11, 2.0));
    let dy = Matrix::from_vec(rows, D, values(rows * D, 12, 2.0));
    let mut want_y = Matrix::default();
    wpe.forward(&ctx, &x, &mut want_y, &mut ());
    let mut want_dw = vec![0.0; T * D];
    wpe.backward(&ctx, &x, &want_y, &(), &dy, &mut [&mut want_dw], false, None);
    let mut y = vec![f32::NAN; rows * D];
    emu::position_forward(elementwise(rows * D), &mut y, x.as_slice(), &wpe.weight, (positions, D));
    assert_eq!(y, want_y.as_slice(), "position_forward");
    // As the backend launches it: the whole table cleared, then added into.
    let mut dw = vec![0.0; T * D];
    emu::position_backward(elementwise(positions * D), &mut dw, dy.as_slice(), (sequences, positions, D), true);
    assert_close(&dw, &want_dw, 1e-5, "position_backward");
}

fn layer_norm_matches<const D: usize>(rows: usize) {
    let mut norm = LayerNorm::<D> { weight: values(D, 13, 2.0), bias: values(D, 14, 2.0) };
    norm.weight.iter_mut().for_each(|w| *w += 1.5);
    let ctx = StepContext::rows(rows);
    let x = Matrix::from_vec(rows, D, values(rows * D, 15, 2.0).iter().map(|v| 3.0 * v + 0.7).collect());
    let dy = Matrix::from_vec(rows, D, values(rows * D, 16, 2.0));
    let (mut want_y, mut saved) = (Matrix::default(), Default::default());
    norm.forward(&ctx, &x, &mut want_y, &mut saved);
    let (mut want_dgamma, mut want_dbeta, mut want_dx) = (vec![0.0; D], vec![0.0; D], Matrix::default());
    norm.backward(&ctx, &x, &want_y, &saved, &dy, &mut [&mut want_dgamma, &mut want_dbeta], false, Some(&mut want_dx));

    let at = format!("LayerNorm<{D}>, {rows} rows");
    let (mut y, mut mean, mut rstd) = (vec![f32::NAN; rows * D], vec![f32::NAN; rows], vec![f32::NAN; rows]);
    let stats = RowStats { mean: &mut mean, rstd: &mut rstd };
    emu::layer_norm_forward(per_row(rows), &mut y, stats, x.as_slice(), (&norm.weight, &norm.bias), rows);
    assert_close(&y, want_y.as_slice(), 2e-5, &format!("{at}: forward"));
    assert_close(&mean, saved.mean(), 1e-5, &format!("{at}: mean"));
    assert_close(&rstd, saved.rstd(), 1e-5, &format!("{at}: 1/std"));
    let mut dx = vec![f32::NAN; rows * D];
    emu::layer_norm_backward_input(per_row(rows), &mut dx, (x.as_slice(), dy.as_slice(), &norm.weight), (&mean, &rstd));
    assert_close(&dx, want_dx.as_slice(), 5e-5, &format!("{at}: input gradient"));
    let (mut dgamma, mut dbeta) = (vec![f32::NAN; D], vec![f32::NAN; D]);
    let params = (&mut dgamma[..], &mut dbeta[..]);
    emu::layer_norm_backward_params(column_tiles(D), params, (x.as_slice(), dy.as_slice()), (&mean, &rstd), false);
    assert_close(&dgamma, &want_dgamma, 5e-5, &format!("{at}: weight gradient"));
    assert_close(&dbeta, &want_dbeta, 5e-5, &format!("{at}: bias gradient"));
    let params = (&mut dgamma[..], &mut dbeta[..]);
    emu::layer_norm_backward_params(LOOPING, params, (x.as_slice(), dy.as_slice()), (&mean, &rstd), true);
    let twice = |v: &[f32]| v.iter().map(|g| 2.0 * g).collect::<Vec<_>>();
    assert_close(&dgamma, &twice(&want_dgamma), 1e-4, &format!("{at}: weight gradient, accumulating"));
    assert_close(&dbeta, &twice(&want_dbeta), 1e-4, &format!("{at}: bias gradient, accumulating"));
}

#[test]
fn layer_norm_matches_the_cpu_layer_narrower_and_wider_than_a_block() {
    layer_norm_matches::<200>(5);
    layer_norm_matches::<700>(3);
}

#[test]
fn cross_entropy_matches_the_cpu_loss() {
    for classes in [65, 300] {
        let rows = 7;
        let logits = Matrix::from_vec(rows, classes, values(rows * classes, 17, 2.0).iter().map(|v| 4.0 * v).collect());
        let labels: Vec<usize> = (0..rows).map(|r| (r * 13) % classes).collect();
        let mut want_grad = Matrix::default();
        let want_loss = CrossEntropyLoss.forward_backward(&logits, &labels, &mut want_grad);
        let (mut loss, mut grad) = (vec![f32::NAN; rows], vec![f32::NAN; rows * classes]);
        let labels: Vec<u32> = labels.iter().map(|&l| l as u32).collect();
        emu::softmax_cross_entropy(per_row(rows), (&mut loss, &mut grad), logits.as_slice(), &labels, classes);
        let mean = loss.iter().map(|&l| f64::from(l)).sum::<f64>() / rows as f64;
        assert!(
            (mean as f32 - want_loss).abs() <= 1e-5 * want_loss.abs(),
            "{classes} classes: loss {mean} against {want_loss}"
        );
        assert_close(&grad, want_grad.as_slice(), 1e-6, &format!("{classes} classes: gradient"));
    }
}

#[test]
fn causal_softmax_and_its_gradient_match_the_definition() {
    // Sequences x heads rows of positions fewer and more than a block's threads.
    for t in [20, 300] {
        let rows = if t > 256 { 2 * t } else { 4 * t };
        let scale = 0.3;
        let scores = values(rows * t, 18, 2.0).iter().map(|v| 5.0 * v).collect::<Vec<f32>>();
        let mut p = scores.clone();
        emu::causal_softmax(per_row(rows), &mut p, (rows, t), scale);
        let mut want = vec![0.0f64; rows * t];
        for r in 0..rows {
            let i = r % t;
            let row = &scores[r * t..=r * t + i];
            let max = row.iter().map(|&s| f64::from(scale) * f64::from(s)).fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = row.iter().map(|&s| (f64::from(scale) * f64::from(s) - max).exp()).sum();
            for (j, &s) in row.iter().enumerate() {
                want[r * t + j] = (f64::from(scale) * f64::from(s) - max).exp() / total;
            }
        }
        let want: Vec<f32> = want.iter().map(|&w| w as f32).collect();
        assert_close(&p, &want, 1e-6, &format!("causal_softmax, {t} positions"));
        assert!(
            (0..rows).all(|r| p[r * t + r % t + 1..(r + 1) * t].iter().all(|&v| v == 0.0)),
            "{t}: the future is zero"
        );

        let dweights = values(rows * t, 19, 2.0);
        let mut ds = dweights.clone();
        emu::causal_softmax_backward(per_row(rows), &mut ds, &p, (rows, t), scale);
        let mut want = vec![0.0f32; rows * t];
        for r in 0..rows {
            let (w, d) = (&p[r * t..(r + 1) * t], &dweights[r * t..(r + 1) * t]);
            let dot: f64 = w.iter().zip(d).map(|(&w, &d)| f64::from(w) * f64::from(d)).sum();
            for j in 0..t {
                want[r * t + j] = (f64::from(w[j]) * (f64::from(d[j]) - dot) * f64::from(scale)) as f32;
            }
        }
        assert_close(&ds, &want, 1e-6, &format!("causal_softmax_backward, {t} positions"));
    }
}
