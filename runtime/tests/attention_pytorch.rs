//! Our `CausalSelfAttention` against nanoGPT's in PyTorch (`fixtures/attention_pytorch.py`,
//! written by real PyTorch): the same parameters and input give the same output, and the same
//! output gradient the same parameter and input gradients, to float32 rounding.

use overlap_runtime::layer::{CausalSelfAttention, Layer, StepContext};
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
    let rows = ctx.row_count();
    let x = Matrix::from_vec(rows, 16, values(&fixture["x"]));
    let (mut y, mut saved) = (Matrix::default(), Default::default());
    layer.forward(&ctx, &x, &mut y, &mut saved);
    let worst = relative(y.as_slice(), &values(&fixture["y"]));
    println!("PyTorch {}: output within {worst:e}", fixture["torch"]);
    assert!(worst < 1e-5, "output off by {worst:e}");

    let dy = Matrix::from_vec(rows, 16, values(&fixture["dy"]));
    let mut grads: Vec<Vec<f32>> =
        <CausalSelfAttention<16, 4> as Layer>::PARAMS.iter().map(|p| vec![0.0; p.numel()]).collect();
    let mut views: Vec<&mut [f32]> = grads.iter_mut().map(Vec::as_mut_slice).collect();
    let mut dx = Matrix::default();
    layer.backward(&ctx, &x, &y, &saved, &dy, &mut views, false, Some(&mut dx));
    for (def, grad) in <CausalSelfAttention<16, 4> as Layer>::PARAMS.iter().zip(&grads) {
        let worst = relative(grad, &values(&fixture["grads"][def.name]));
        println!("{}: gradient within {worst:e}", def.name);
        assert!(worst < 1e-5, "{} gradient off by {worst:e}", def.name);
    }
    let worst = relative(dx.as_slice(), &values(&fixture["dx"]));
    println!("input gradient within {worst:e}");
    assert!(worst < 1e-5, "input gradient off by {worst:e}");
}
