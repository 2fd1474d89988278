//! The backend's matrix products as it hands them to cuBLAS (`runtime/src/cuda/products.rs`),
//! computed as column-major BLAS defines them, against the row-major products they stand for;
//! and the GPU paths of a linear layer and of causal self-attention (those products, in the
//! order and at the offsets `cuda::attention` queues them, and the kernels) against the CPU
//! layers.

mod common;

use common::{assert_close, values};
use kernel_emulation as emu;
use kernel_emulation::launch_shapes::{column_tiles, elementwise, per_row};
use kernel_emulation::products::{self, Attention, HeadProduct, RowMajor};
use overlap_runtime::{CausalSelfAttention, Layer, Linear, Matrix, StepContext};

#[test]
fn row_major_products_are_the_column_major_products_cublas_computes() {
    let (m, n, k) = (5, 7, 3);
    for transpose in [(false, false), (true, false), (false, true), (true, true)] {
        // Every view is a block of a wider matrix (rows 2 to 4 elements longer than they are).
        let (a_rows, a_cols) = if transpose.0 { (k, m) } else { (m, k) };
        let (b_rows, b_cols) = if transpose.1 { (n, k) } else { (k, n) };
        let (lda, ldb, ldc) = (a_cols + 2, b_cols + 3, n + 4);
        let (a, b) = (values(a_rows * lda, 1, 1.0), values(b_rows * ldb, 2, 1.0));
        let c0 = values(m * ldc, 3, 1.0);
        let op = |x: &[f32], transposed: bool, ld: usize, (i, j): (usize, usize)| {
            f64::from(if transposed { x[j * ld + i] } else { x[i * ld + j] })
        };
        let mut want = c0.clone();
        for i in 0..m {
            for j in 0..n {
                let sum: f64 =
                    (0..k).map(|l| op(&a, transpose.0, lda, (i, l)) * op(&b, transpose.1, ldb, (l, j))).sum();
                want[i * ldc + j] = (sum + 0.5 * f64::from(c0[i * ldc + j])) as f32;
            }
        }
        let mut c = c0.clone();
        emu::product(RowMajor { transpose, dims: (m, n, k), ld: (lda, ldb, ldc) }, (&a, &b), 0.5, &mut c);
        assert_close(&c, &want, 1e-6, &format!("transpose {transpose:?}"));
        assert!(
            (0..m).all(|i| c[i * ldc + n..(i + 1) * ldc] == c0[i * ldc + n..(i + 1) * ldc]),
            "transpose {transpose:?}: wrote past a row of C"
        );
    }
}

#[test]
fn a_linear_layer_on_the_gpu_path_matches_the_cpu_layer() {
    const IN: usize = 37;
    const OUT: usize = 29;
    let rows = 11;
    let layer = Linear::<IN, OUT> { weight: values(OUT * IN, 4, 1.0), bias: values(OUT, 5, 1.0) };
    let ctx = StepContext::rows(rows);
    let x = Matrix::from_vec(rows, IN, values(rows * IN, 6, 1.0));
    let dy = Matrix::from_vec(rows, OUT, values(rows * OUT, 7, 1.0));
    let (mut want_y, mut want_dx) = (Matrix::default(), Matrix::default());
    layer.forward(&ctx, &x, &mut want_y, &mut ());
    let (mut want_dw, mut want_db) = (vec![0.0; OUT * IN], vec![0.0; OUT]);
    layer.backward(&ctx, &x, &want_y, &(), &dy, &mut [&mut want_dw, &mut want_db], false, Some(&mut want_dx));

    // `ops::linear_forward`: the projection, then the bias kernel.
    let mut y = vec![f32::NAN; rows * OUT];
    emu::product(products::projection(IN, OUT, rows), (x.as_slice(), &layer.weight), 0.0, &mut y);
    emu::bias_add_rows(elementwise(rows * OUT), &mut y, &layer.bias, rows);
    assert_close(&y, want_y.as_slice(), 1e-5, "forward");
    // `ops::linear_backward`: the bias kernel, the weight's product, the input's.
    let (mut dw, mut db, mut dx) = (vec![f32::NAN; OUT * IN], vec![f32::NAN; OUT], vec![f32::NAN; rows * IN]);
    emu::bias_grad(column_tiles(OUT), &mut db, dy.as_slice(), rows, false);
    emu::product(products::weight_gradient(IN, OUT, rows), (dy.as_slice(), x.as_slice()), 0.0, &mut dw);
    emu::product(products::input_gradient(IN, OUT, rows), (dy.as_slice(), &layer.weight), 0.0, &mut dx);
    assert_close(&db, &want_db, 1e-5, "bias gradient");
    assert_close(&dw, &want_dw, 1e-5, "weight gradient");
    assert_close(&dx, want_dx.as_slice(), 1e-5, "input gradient");
    // Accumulating (a later micro-step): beta 1 adds the product to what is there.
    emu::product(products::weight_gradient(IN, OUT, rows), (dy.as_slice(), x.as_slice()), 1.0, &mut dw);
    let twice: Vec<f32> = want_dw.iter().map(|g| 2.0 * g).collect();
    assert_close(&dw, &twice, 1e-5, "weight gradient, accumulating");
}

#[test]
fn attention_on_the_gpu_path_matches_the_cpu_layer() {
    const D: usize = 24;
    const H: usize = 3;
    let (sequences, t) = (2, 5);
    let rows = sequences * t;
    let layer = CausalSelfAttention::<D, H> {
        c_attn_weight: values(3 * D * D, 8, 1.0),
        c_attn_bias: values(3 * D, 9, 1.0),
        c_proj_weight: values(D * D, 10, 1.0),
        c_proj_bias: values(D, 11, 1.0),
    };
    let ctx = StepContext::sequences(sequences, t);
    let x = Matrix::from_vec(rows, D, values(rows * D, 12, 1.0));
    let dy = Matrix::from_vec(rows, D, values(rows * D, 13, 1.0));
    let (mut want_y, mut saved, mut want_dx) = (Matrix::default(), Default::default(), Matrix::default());
    layer.forward(&ctx, &x, &mut want_y, &mut saved);
    let mut want: [Vec<f32>; 4] = [vec![0.0; 3 * D * D], vec![0.0; 3 * D], vec![0.0; D * D], vec![0.0; D]];
    let [wa, ba, wp, bp] = &mut want;
    layer.backward(&ctx, &x, &want_y, &saved, &dy, &mut [wa, ba, wp, bp], false, Some(&mut want_dx));

    // `cuda::attention`'s forward, step by step.
    let shape = Attention { sequences, t, width: D, heads: H };
    let per_head = |p: HeadProduct, (a, b): (&[f32], &[f32]), c: &mut [f32]| {
        emu::head_product(p, (&a[p.a..], &b[p.b..]), &mut c[p.c..]);
    };
    let linear = |(input, output): (usize, usize), x: &[f32], (w, b): (&[f32], &[f32])| {
        let mut y = vec![f32::NAN; rows * output];
        emu::product(products::projection(input, output, rows), (x, w), 0.0, &mut y);
        emu::bias_add_rows(elementwise(rows * output), &mut y, b, rows);
        y
    };
    let scale = 1.0 / ((D / H) as f32).sqrt();
    let qkv = linear((D, 3 * D), x.as_slice(), (&layer.c_attn_weight, &layer.c_attn_bias));
    let mut probs = vec![f32::NAN; shape.scores()];
    (0..H).for_each(|h| per_head(shape.head_scores(h), (&qkv, &qkv), &mut probs));
    emu::causal_softmax(per_row(sequences * H * t), &mut probs, (sequences * H * t, t), scale);
    let mut heads = vec![f32::NAN; rows * D];
    (0..H).for_each(|h| per_head(shape.head_values(h), (&probs, &qkv), &mut heads));
    let y = linear((D, D), &heads, (&layer.c_proj_weight, &layer.c_proj_bias));
    assert_close(&y, want_y.as_slice(), 1e-5, "attention forward");

    // And its backward.
    let linear_backward = |(input, output): (usize, usize), (x, w, dy): (&[f32], &[f32], &[f32])| {
        let (mut dw, mut db, mut dx) =
            (vec![f32::NAN; output * input], vec![f32::NAN; output], vec![f32::NAN; rows * input]);
        emu::bias_grad(column_tiles(output), &mut db, dy, rows, false);
        emu::product(products::weight_gradient(input, output, rows), (dy, x), 0.0, &mut dw);
        emu::product(products::input_gradient(input, output, rows), (dy, w), 0.0, &mut dx);
        (dw, db, dx)
    };
    let (dwp, dbp, d_heads) = linear_backward((D, D), (&heads, &layer.c_proj_weight, dy.as_slice()));
    let (mut ds, mut d_qkv) = (vec![f32::NAN; shape.scores()], vec![f32::NAN; rows * 3 * D]);
    for h in 0..H {
        per_head(shape.head_weights_gradient(h), (&d_heads, &qkv), &mut ds);
        per_head(shape.head_values_gradient(h), (&probs, &d_heads), &mut d_qkv);
    }
    emu::causal_softmax_backward(per_row(sequences * H * t), &mut ds, &probs, (sequences * H * t, t), scale);
    for h in 0..H {
        per_head(shape.head_queries_gradient(h), (&ds, &qkv), &mut d_qkv);
        per_head(shape.head_keys_gradient(h), (&ds, &qkv), &mut d_qkv);
    }
    let (dwa, dba, dx) = linear_backward((D, 3 * D), (x.as_slice(), &layer.c_attn_weight, &d_qkv));
    for (got, want, what) in [
        (&dwa, &want[0], "c_attn.weight"),
        (&dba, &want[1], "c_attn.bias"),
        (&dwp, &want[2], "c_proj.weight"),
        (&dbp, &want[3], "c_proj.bias"),
    ] {
        assert_close(got, want, 1e-5, &format!("attention backward: {what}"));
    }
    assert_close(&dx, want_dx.as_slice(), 1e-5, "attention backward: input");
}
