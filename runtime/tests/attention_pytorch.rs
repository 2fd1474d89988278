//! Our `CausalSelfAttention` against nanoGPT's in PyTorch (`fixtures/attention_pytorch.py`,
//! written by real PyTorch): the same parameters and input give the same output, and the same
//! output gradient the same parameter and input gradients, to float32 rounding; and the same on a
//! training step that drops attention's weights (nanoGPT's `attn_dropout`, with our mask).

use overlap_runtime::layer::{CausalSelfAttention, DropoutDraw, Layer, StepContext};
use overlap_runtime::tensor::Matrix;
use serde_json::Value;

fn values(v: &Value) -> Vec<f32> {
    v.as_array().expect("a list of numbers").iter().map(|x| x.as_f64().expect("a number") as f32).collect()
}

/// The largest `|ours - theirs| / max(|theirs|)` of one tensor.
fn relative(ours: &[f32], theirs: &[f32]) -> f32 {
    assert_eq!(ours.len(), theirs.len());
    let scale = theirs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    ours.iter().zip(theirs).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max) / scale
}

/// The output and gradients of `layer` on the fixture's input in `ctx`, against `want` (an
/// object with `y`, `grads` and `dx`).
fn compare(layer: &CausalSelfAttention<16, 4>, ctx: &StepContext, fixture: &Value, want: &Value, what: &str) {
    let rows = ctx.row_count();
    let x = Matrix::from_vec(rows, 16, values(&fixture["x"]));
    let (mut y, mut saved) = (Matrix::default(), Default::default());
    layer.forward(ctx, &x, &mut y, &mut saved);
    let worst = relative(y.as_slice(), &values(&want["y"]));
    println!("{what}, PyTorch {}: output within {worst:e}", fixture["torch"]);
    assert!(worst < 1e-5, "{what}: output off by {worst:e}");

    let dy = Matrix::from_vec(rows, 16, values(&fixture["dy"]));
    let mut grads: Vec<Vec<f32>> =
        <CausalSelfAttention<16, 4> as Layer>::PARAMS.iter().map(|p| vec![0.0; p.numel()]).collect();
    let mut views: Vec<&mut [f32]> = grads.iter_mut().map(Vec::as_mut_slice).collect();
    let mut dx = Matrix::default();
    layer.backward(ctx, &x, &y, &saved, &dy, &mut views, false, Some(&mut dx));
    for (def, grad) in <CausalSelfAttention<16, 4> as Layer>::PARAMS.iter().zip(&grads) {
        let worst = relative(grad, &values(&want["grads"][def.name]));
        println!("{what}, {}: gradient within {worst:e}", def.name);
        assert!(worst < 1e-5, "{what}: {} gradient off by {worst:e}", def.name);
    }
    let worst = relative(dx.as_slice(), &values(&want["dx"]));
    println!("{what}: input gradient within {worst:e}");
    assert!(worst < 1e-5, "{what}: input gradient off by {worst:e}");
}

#[test]
fn matches_nanogpts_attention_in_pytorch() {
    let fixture: Value =
        serde_json::from_str(include_str!("fixtures/attention_pytorch.json")).expect("the fixture parses");
    let (sequences, positions) =
        (fixture["sequences"].as_u64().unwrap() as usize, fixture["positions"].as_u64().unwrap() as usize);
    assert_eq!((fixture["width"].as_u64(), fixture["heads"].as_u64()), (Some(16), Some(4)));
    let mut layer = CausalSelfAttention::<16, 4>::init(&mut overlap_runtime::InitRng::new(0));
    for (i, def) in <CausalSelfAttention<16, 4> as Layer>::PARAMS.iter().enumerate() {
        layer.param_mut(i).copy_from_slice(&values(&fixture["params"][def.name]));
    }
    let ctx = StepContext::sequences(sequences, positions);
    compare(&layer, &ctx, &fixture, &fixture, "no dropout");

    // As the layer at index `layer` of a model sees a training step's context (`for_layer`).
    let dropout = &fixture["dropout"];
    let number = |key: &str| dropout[key].as_f64().unwrap_or_else(|| panic!("dropout.{key} is a number"));
    assert!(number("dropped") > 10.0, "the fixture's mask drops {} weights", number("dropped"));
    let draw = DropoutDraw::new(number("rate") as f32, number("seed") as u64, number("first_row") as u64)
        .for_layer(number("layer") as usize);
    compare(&layer, &ctx.with_dropout(draw), &fixture, dropout, "dropping the weights");
}
