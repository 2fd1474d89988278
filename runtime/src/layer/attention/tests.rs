use super::*;
use crate::layer::DropoutDraw;

/// Panels compute what the whole square does (their products run over fewer keys, and what
/// they skip is exact zeros): the output and every gradient, at 65 positions (a panel and
/// one) and at 150 (the last panel ragged), without and with dropout of the weights. Each
/// panel run follows a run on other values, so that reading scores or scratch a panel did
/// not write would show.
#[test]
fn causal_panels_compute_what_the_whole_square_does() {
    const W: usize = 16;
    let layer = CausalSelfAttention::<W, 2>::init(&mut InitRng::new(3));
    let dropping = DropoutDraw::new(0.3, 9, 1000).for_layer(4);
    for (sequences, t, draw) in [(2, PANEL + 1, DropoutDraw::NONE), (1, 2 * PANEL + 22, DropoutDraw::NONE)]
        .into_iter()
        .chain([(2, PANEL + 1, dropping), (1, 2 * PANEL + 22, dropping)])
    {
        let ctx = StepContext::sequences(sequences, t).with_dropout(draw);
        let rows = sequences * t;
        let matrix = |seed| Matrix::from_vec(rows, W, InitRng::new(seed).uniform(rows * W, 1.0));
        let mut saved = AttentionSaved::default();
        let run = |x: &Matrix, dy: &Matrix, saved: &mut AttentionSaved, panel| {
            let mut y = Matrix::default();
            layer.forward_in_panels(&ctx, x, &mut y, saved, panel);
            let params = <CausalSelfAttention<W, 2> as Layer>::PARAMS;
            let mut grads: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; p.numel()]).collect();
            let mut views: Vec<&mut [f32]> = grads.iter_mut().map(Vec::as_mut_slice).collect();
            let mut dx = Matrix::default();
            layer.backward_in_panels(&ctx, x, saved, dy, &mut views, false, Some(&mut dx), panel);
            (y, grads, dx)
        };
        let (x, dy) = (matrix(4), matrix(5));
        let _ = run(&matrix(6), &matrix(7), &mut saved, PANEL);
        let (y, grads, dx) = run(&x, &dy, &mut saved, PANEL);
        let (y_square, grads_square, dx_square) = run(&x, &dy, &mut AttentionSaved::default(), usize::MAX);
        let close = |what: &str, got: &[f32], want: &[f32]| {
            for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
                assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "t {t}, {draw:?}: {what}[{i}] {g} against {w}");
            }
        };
        close("output", y.as_slice(), y_square.as_slice());
        close("dx", dx.as_slice(), dx_square.as_slice());
        for (i, (g, w)) in grads.iter().zip(&grads_square).enumerate() {
            close(<CausalSelfAttention<W, 2> as Layer>::PARAMS[i].name, g, w);
        }
    }
}

/// Dropout of the weights: `y = (P ⊙ mask)·v` with the mask `Dropout`'s draw gives rows of
/// the weights taken as `[sequences, H, T]` rows of `T`, computed here from the undropped
/// layer's weights and values.
#[test]
fn dropout_drops_the_weights_after_the_softmax() {
    const W: usize = 8;
    let layer = CausalSelfAttention::<W, 2>::init(&mut InitRng::new(3));
    let (sequences, t) = (2, 5);
    let x = Matrix::from_vec(sequences * t, W, InitRng::new(4).uniform(sequences * t * W, 1.0));
    let draw = DropoutDraw::new(0.5, 11, 3 * t as u64).for_layer(1);
    let (mut plain, mut dropped) = (AttentionSaved::default(), AttentionSaved::default());
    let (mut y_plain, mut y) = (Matrix::default(), Matrix::default());
    layer.forward(&StepContext::sequences(sequences, t), &x, &mut y_plain, &mut plain);
    layer.forward(&StepContext::sequences(sequences, t).with_dropout(draw), &x, &mut y, &mut dropped);
    assert_eq!(plain.probs, dropped.probs, "the softmax's weights are kept undropped");
    let weights = draw.for_weights(2);
    let mut heads = vec![0.0f32; sequences * t * W];
    let mut zeroed = 0;
    for (s, h, i) in (0..sequences).flat_map(|s| (0..2).flat_map(move |h| (0..t).map(move |i| (s, h, i)))) {
        let p = &plain.probs[((s * 2 + h) * t + i) * t..][..t];
        for (j, factor) in weights.row_factors((s * 2 + h) * t + i).take(i + 1).enumerate() {
            zeroed += usize::from(factor == 0.0);
            for f in 0..W / 2 {
                let v = plain.qkv[(s * t + j) * 3 * W + 2 * W + h * W / 2 + f];
                heads[(s * t + i) * W + h * W / 2 + f] += p[j] * factor * v;
            }
        }
    }
    assert!(zeroed > 5, "a rate of 0.5 dropped {zeroed} of 30 weights");
    for (got, want) in dropped.heads.iter().zip(&heads) {
        assert!((got - want).abs() <= 1e-6, "{:?} against {heads:?}", dropped.heads);
    }
    assert_ne!(y.as_slice(), y_plain.as_slice());
}

#[test]
fn causal_softmax_matches_f64_and_zeroes_the_future() {
    for t in [1, 5, 16, 17, 40, 64] {
        let mut scores: Vec<f32> = (0..t * t).map(|n| ((n * 7919 % 101) as f32 - 50.0) / 7.0).collect();
        let original = scores.clone();
        causal_softmax(&mut scores, t, 0);
        for i in 0..t {
            let row = &original[i * t..=i * t + i];
            let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
            let total: f64 = row.iter().map(|&x| (f64::from(x) - max).exp()).sum();
            for j in 0..t {
                let got = scores[i * t + j];
                if j > i {
                    assert_eq!(got.to_bits(), 0, "t {t}: ({i}, {j}) is in the future");
                } else {
                    let want = (f64::from(original[i * t + j]) - max).exp() / total;
                    assert!(
                        (f64::from(got) - want).abs() <= 1e-6 * want.max(1e-3),
                        "t {t}: ({i}, {j}) {got} vs {want}"
                    );
                }
            }
        }
    }
}
