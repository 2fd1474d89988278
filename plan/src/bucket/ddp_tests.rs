//! The planner against PyTorch DDP's own assignment: a transcription of `reducer.cpp`'s
//! `compute_bucket_assignment_by_size` (one dtype, one device, no sparse gradients), run over
//! the parameters in the order DDP would see them, on the example models and on random ones.
//! Each example's expected buckets are also written out by hand, with the reasoning.

use super::tests::{config, linear, member_names, mlp, relu};
use super::*;
use crate::spec::{ReadyOrder, Width, MIB};

/// `compute_bucket_assignment_by_size(tensors, bucket_size_limits, {}, tensor_indices)`: indices
/// into `sizes`, bucket by bucket. The limit iterator starts at the first limit and advances
/// after each closed bucket, staying on the last; a bucket closes once `size >= limit`; the
/// remainder is appended last. With `tensor_indices` given (the rebuilt case) the result is not
/// sorted: it stays in the order of `sizes`.
fn ddp_assignment(sizes: &[usize], limits: &[usize]) -> Vec<Vec<usize>> {
    let (mut result, mut indices, mut size, mut limit) = (Vec::new(), Vec::new(), 0usize, 0usize);
    for (i, &bytes) in sizes.iter().enumerate() {
        indices.push(i);
        size += bytes;
        if size >= limits[limit] {
            result.push(std::mem::take(&mut indices));
            size = 0;
            limit = (limit + 1).min(limits.len() - 1);
        }
    }
    if !indices.is_empty() {
        result.push(indices);
    }
    result
}

/// The order PyTorch's autograd readies a layer's parameters in, by layer kind, as observed with
/// `register_post_accumulate_grad_hook` (`compare/ready_order.py` prints it): `nn.Linear` readies
/// its bias (the `addmm` input) before its weight (behind a transpose); `nn.LayerNorm` its weight
/// before its bias (equal-priority inputs of `NativeLayerNormBackward0`, in input order). Kept
/// apart from `LayerSpec::ready`, so that a spec with the wrong order fails here.
fn pytorch_ready_names(kind: &str) -> &'static [&'static str] {
    match kind.split('<').next().unwrap_or(kind) {
        "Linear" => &["bias", "weight"],
        "LayerNorm" => &["weight", "bias"],
        _ => &[],
    }
}

/// A layer's parameters in PyTorch's ready order; a kind with one parameter (or none) needs no
/// table.
fn pytorch_ready(l: &LayerSpec) -> Vec<&ParamSpec> {
    if l.params.len() <= 1 {
        return l.params.iter().collect();
    }
    let names = pytorch_ready_names(&l.kind);
    assert_eq!(names.len(), l.params.len(), "no observed ready order for `{}`", l.kind);
    names.iter().map(|n| l.params.iter().find(|p| p.name == *n).expect("a parameter of that name")).collect()
}

/// The order DDP's reducer records gradients in (`rebuilt_params_`) for these layers: the last
/// layer first, each layer's parameters in PyTorch's observed order. Split at our boundaries,
/// which DDP does not have: each piece is assigned on its own, only the very first bucket with
/// the first limit.
fn ddp_rebuilt(layers: &[LayerSpec], first: usize, cap: usize) -> Vec<Vec<String>> {
    let mut pieces: Vec<Vec<(String, usize)>> = vec![Vec::new()];
    for l in layers.iter().rev() {
        for p in pytorch_ready(l) {
            pieces.last_mut().unwrap().push((format!("{}.{}", l.name, p.name), p.numel() * ELEM_BYTES));
        }
        if l.bucket_boundary {
            pieces.push(Vec::new());
        }
    }
    let mut buckets: Vec<Vec<String>> = Vec::new();
    for piece in pieces.iter().filter(|p| !p.is_empty()) {
        let limits = if buckets.is_empty() { vec![first, cap] } else { vec![cap] };
        let sizes: Vec<usize> = piece.iter().map(|p| p.1).collect();
        for bucket in ddp_assignment(&sizes, &limits) {
            buckets.push(bucket.into_iter().map(|i| piece[i].0.clone()).collect());
        }
    }
    buckets
}

/// DDP's constructor: definition order, `bucket_indices` sorted by lowest index, then handed to
/// the reducer reversed (no boundaries).
fn ddp_first_iteration(layers: &[LayerSpec], first: usize, cap: usize) -> Vec<Vec<String>> {
    let params: Vec<(String, usize)> = layers
        .iter()
        .flat_map(|l| l.params.iter().map(move |p| (format!("{}.{}", l.name, p.name), p.numel() * ELEM_BYTES)))
        .collect();
    let sizes: Vec<usize> = params.iter().map(|p| p.1).collect();
    let buckets = ddp_assignment(&sizes, &[first, cap]);
    buckets.into_iter().rev().map(|b| b.into_iter().map(|i| params[i].0.clone()).collect()).collect()
}

/// Checks the planner against the hand-written `expected` and against DDP's rebuilt buckets.
fn check(layers: &[LayerSpec], first: usize, cap: usize, expected: &[&[&str]]) {
    let planned = member_names(&plan_buckets("M", layers, &config(first, cap)).unwrap());
    assert_eq!(planned, expected, "by hand");
    assert_eq!(planned, ddp_rebuilt(layers, first, cap), "DDP's rebuilt buckets");
}

#[test]
fn mlp_matches_ddp_rebuilt_buckets() {
    // Sizes: head 40 B + 80 KiB, fc3 and fc2 8 KiB + 16 MiB, fc1 8 KiB + 6.1 MiB. The first
    // bucket (1 MiB) closes once fc3.weight is in (16.09 MiB); fc2's pair reaches 8 MiB; fc1 is
    // the remainder.
    let expected: &[&[&str]] = &[
        &["head.bias", "head.weight", "fc3.bias", "fc3.weight"],
        &["fc2.bias", "fc2.weight"],
        &["fc1.bias", "fc1.weight"],
    ];
    check(&mlp(), MIB, 8 * MIB, expected);
    // At DDP's default 25 MiB, fc2 and fc1 (22.1 MiB) stay together.
    check(&mlp(), MIB, 25 * MIB, &[expected[0], &["fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"]]);
}

fn tower() -> Vec<LayerSpec> {
    let mut layers = vec![linear("fc1", 64, 1024), relu("act1")];
    for (i, name) in ["fc2", "fc3", "fc4", "fc5", "fc6", "fc7", "fc8"].into_iter().enumerate() {
        layers.push(linear(name, 1024, 1024).with_bucket_boundary());
        layers.push(relu(["act2", "act3", "act4", "act5", "act6", "act7", "act8"][i]));
    }
    layers.push(linear("head", 1024, 10));
    layers
}

#[test]
fn tower_matches_ddp_rebuilt_buckets() {
    // head (40 KiB) is under 1 MiB, fc8.weight (4 MiB) closes the first bucket; every other
    // boundary closes a 4 MiB bucket of one layer (under the 25 MiB cap); fc1 (260 KiB) is left.
    // DDP itself gives the same with `bucket_cap_mb = 4`: each wide layer's 4 MiB + 4 KiB reaches it.
    let wide = |n: &'static str| -> Vec<String> { vec![format!("{n}.bias"), format!("{n}.weight")] };
    let mut expected =
        vec![vec!["head.bias".to_string(), "head.weight".into(), "fc8.bias".into(), "fc8.weight".into()]];
    expected.extend(["fc7", "fc6", "fc5", "fc4", "fc3", "fc2", "fc1"].map(wide));
    let expected: Vec<Vec<&str>> = expected.iter().map(|b| b.iter().map(String::as_str).collect()).collect();
    let expected: Vec<&[&str]> = expected.iter().map(Vec::as_slice).collect();
    check(&tower(), MIB, 25 * MIB, &expected);
    let unmarked: Vec<LayerSpec> = tower().into_iter().map(|l| LayerSpec { bucket_boundary: false, ..l }).collect();
    assert_eq!(
        ddp_rebuilt(&unmarked, MIB, 4 * MIB),
        member_names(&plan_buckets("M", &tower(), &config(MIB, 25 * MIB)).unwrap())
    );
}

#[test]
fn uneven_ddp_matches_ddp_rebuilt_buckets() {
    let mut layers = vec![linear("embed", 784, 1024), relu("act0"), linear("fc1", 1024, 512)];
    for name in ["fc2", "fc3", "fc4", "fc5", "fc6"] {
        layers.push(relu("act"));
        layers.push(linear(name, 512, 512));
    }
    layers.push(relu("act6"));
    layers.push(linear("head", 512, 10));
    // head (20 KiB), fc6.bias, then fc6.weight (1 MiB) takes the first bucket to 1.02 MiB. The
    // rest, fc5 to embed (9.1 MiB), stays under 25 MiB: one bucket, complete after embed.
    let rest = [
        "fc5.bias",
        "fc5.weight",
        "fc4.bias",
        "fc4.weight",
        "fc3.bias",
        "fc3.weight",
        "fc2.bias",
        "fc2.weight",
        "fc1.bias",
        "fc1.weight",
        "embed.bias",
        "embed.weight",
    ];
    check(&layers, MIB, 25 * MIB, &[&["head.bias", "head.weight", "fc6.bias", "fc6.weight"], &rest]);
}

#[test]
fn custom_layer_matches_ddp_rebuilt_buckets() {
    let layers = vec![
        linear("embed", 784, 256),
        LayerSpec::new("norm", "LayerNorm<256>", Width::Preserving)
            .with_param("weight", &[256])
            .with_param("bias", &[256])
            .with_ready(ReadyOrder::Definition),
        LayerSpec::new("act", "Gelu", Width::Preserving),
        LayerSpec::new("gain", "Gain<256>", Width::Fixed { input: 256, output: 256 }).with_param("gain", &[256]),
        linear("head", 256, 10).with_bucket_boundary(),
    ];
    // head's 10 KiB end at its boundary; everything else (785 KiB) stays under 1 MiB. DDP alone
    // gives the same with a first bucket of 10 KiB.
    let expected: &[&[&str]] =
        &[&["head.bias", "head.weight"], &["gain.gain", "norm.weight", "norm.bias", "embed.bias", "embed.weight"]];
    check(&layers, MIB, MIB, expected);
    let unmarked: Vec<LayerSpec> = layers.iter().cloned().map(|l| LayerSpec { bucket_boundary: false, ..l }).collect();
    assert_eq!(ddp_rebuilt(&unmarked, 10 * 1024, MIB), expected);
}

#[test]
fn a_boundary_splits_what_the_cap_would_keep_together() {
    // At 25 MiB, fc2 and fc1 share a bucket (see above); a boundary on fc2 separates them.
    let mut layers = mlp();
    layers[2].bucket_boundary = true;
    let expected: &[&[&str]] = &[
        &["head.bias", "head.weight", "fc3.bias", "fc3.weight"],
        &["fc2.bias", "fc2.weight"],
        &["fc1.bias", "fc1.weight"],
    ];
    check(&layers, MIB, 25 * MIB, expected);
}

fn layer_norm(name: &'static str, width: usize) -> LayerSpec {
    LayerSpec::new(name, format!("LayerNorm<{width}>"), Width::Fixed { input: width, output: width })
        .with_param("weight", &[width])
        .with_param("bias", &[width])
        .with_ready(ReadyOrder::Definition)
}

/// A small deterministic generator (64-bit LCG), so the property test needs no dependency.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n) as usize
    }
}

#[test]
fn random_models_match_ddp_in_both_orders() {
    let mut rng = Lcg(18);
    for case in 0..500 {
        let layers: Vec<LayerSpec> = (0..1 + rng.below(12))
            .map(|i| {
                let name: &'static str = Box::leak(format!("l{i}").into_boxed_str());
                match rng.below(4) {
                    0 => relu(name),
                    1 => layer_norm(name, 1 + rng.below(300)),
                    _ => linear(name, 1 + rng.below(300), 1 + rng.below(300)),
                }
            })
            .collect();
        let (first, cap) = (1 + rng.below(64 * 1024), 1 + rng.below(256 * 1024));
        let Ok(ready) = plan_buckets("M", &layers, &config(first, cap)) else { continue };
        assert_eq!(member_names(&ready), ddp_rebuilt(&layers, first, cap), "case {case}");
        let old = plan_buckets_in("M", &layers, &config(first, cap), BucketOrder::DdpFirstIteration).unwrap();
        assert_eq!(member_names(&old), ddp_first_iteration(&layers, first, cap), "case {case}");
    }
}
