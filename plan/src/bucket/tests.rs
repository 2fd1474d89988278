use super::*;
use crate::spec::{Width, MIB};

pub(super) fn linear(name: &'static str, input: usize, output: usize) -> LayerSpec {
    LayerSpec::new(name, format!("Linear<{input}, {output}>"), Width::Fixed { input, output })
        .with_param("weight", &[output, input])
        .with_param("bias", &[output])
        .with_flops(2 * (input * output) as u64)
}

pub(super) fn relu(name: &'static str) -> LayerSpec {
    LayerSpec::new(name, "Relu", Width::Preserving)
}

pub(super) fn config(first: usize, cap: usize) -> BucketLimits {
    BucketLimits::Capped { first_bucket_bytes: first, bucket_cap_bytes: cap }
}

pub(super) fn member_names(s: &Schedule) -> Vec<Vec<String>> {
    s.buckets.iter().map(|b| b.params.iter().map(|&r| s.param_name(r)).collect()).collect()
}

pub(super) fn mlp() -> Vec<LayerSpec> {
    vec![
        linear("fc1", 784, 2048),
        relu("act1"),
        linear("fc2", 2048, 2048),
        relu("act2"),
        linear("fc3", 2048, 2048),
        relu("act3"),
        linear("head", 2048, 10),
    ]
}

#[test]
fn mlp_gets_buckets_in_ready_order_with_the_small_first_bucket_first() {
    let s = plan_buckets("Mlp", &mlp(), &config(MIB, 8 * MIB)).unwrap();
    // Ready order: head.bias, head.weight (80 KiB), fc3.bias: still under 1 MiB; fc3.weight
    // (16 MiB) takes the first bucket over its limit. fc2's bias and weight reach 8 MiB; fc1's
    // 6.1 MiB are what is left. One bucket per wide layer, each launched right after it.
    assert_eq!(
        member_names(&s),
        vec![
            vec!["head.bias", "head.weight", "fc3.bias", "fc3.weight"],
            vec!["fc2.bias", "fc2.weight"],
            vec!["fc1.bias", "fc1.weight"],
        ]
    );
    let launch: Vec<usize> = s.buckets.iter().map(|b| b.launch_after).collect();
    assert_eq!(launch, vec![4, 2, 0], "launched after fc3, fc2, fc1");
    assert_eq!(s.param_count(), 784 * 2048 + 2048 + 2 * (2048 * 2048 + 2048) + 2048 * 10 + 10);
}

#[test]
fn ddp_first_iteration_fills_in_definition_order_and_launches_the_first_bucket_last() {
    let s = plan_buckets_in("Mlp", &mlp(), &config(MIB, 8 * MIB), BucketOrder::DdpFirstIteration).unwrap();
    // fc1.weight alone is 6.1 MiB >= 1 MiB: the first bucket closes right after it.
    // fc1.bias + fc2.weight (16 MiB) >= 8 MiB closes the second, fc2.bias + fc3.weight the
    // third; the rest is the output layer's bucket, launched first.
    assert_eq!(
        member_names(&s),
        vec![
            vec!["fc3.bias", "head.weight", "head.bias"],
            vec!["fc2.bias", "fc3.weight"],
            vec!["fc1.bias", "fc2.weight"],
            vec!["fc1.weight"],
        ]
    );
    let launch: Vec<usize> = s.buckets.iter().map(|b| b.launch_after).collect();
    assert_eq!(launch, vec![4, 2, 0, 0], "launched after fc3, fc2, fc1, fc1");
}

#[test]
fn offsets_follow_ready_order() {
    let s = plan_buckets("Mlp", &mlp(), &config(MIB, 8 * MIB)).unwrap();
    let head_bias = s.param(ParamRef { layer: 6, param: 1 });
    let head_weight = s.param(ParamRef { layer: 6, param: 0 });
    assert_eq!((head_bias.bucket, head_bias.offset), (0, 0), "the first gradient ready is first in the first bucket");
    assert_eq!((head_weight.bucket, head_weight.offset), (0, 10));
}

#[test]
fn offsets_are_contiguous_in_buffer_order() {
    let s = plan_buckets("Mlp", &mlp(), &config(MIB, 8 * MIB)).unwrap();
    for (k, b) in s.buckets.iter().enumerate() {
        let mut next = 0;
        for &r in b.params.iter() {
            let p = s.param(r);
            assert_eq!((p.bucket, p.offset), (k, next));
            next += p.numel();
        }
        assert_eq!(next, b.numel);
    }
}

#[test]
fn default_caps_put_small_model_in_one_bucket() {
    let layers = vec![linear("a", 4, 3), relu("r"), linear("b", 3, 2)];
    let s = plan_buckets("Tiny", &layers, &BucketLimits::default()).unwrap();
    assert_eq!(member_names(&s), vec![vec!["b.bias", "b.weight", "a.bias", "a.weight"]]);
    assert_eq!(s.buckets[0].launch_after, 0);
}

#[test]
fn one_layer_bigger_than_the_cap_gets_its_own_bucket_and_overshoots() {
    // 4096x4096 weight = 64 MiB, far above a 25 MiB cap: never split.
    let layers =
        vec![linear("small", 8, 8), linear("huge", 8, 4096), linear("big", 4096, 4096), linear("out", 4096, 2)];
    let s = plan_buckets("M", &layers, &config(MIB, 25 * MIB)).unwrap();
    let names = member_names(&s);
    assert!(names.iter().any(|b| b.contains(&"big.weight".to_string())));
    let big = s.param(ParamRef { layer: 2, param: 0 });
    assert!(s.buckets[big.bucket].bytes() >= 64 * MIB);
    assert_eq!(s.param_count(), layers.iter().flat_map(|l| &l.params).map(|p| p.numel()).sum::<usize>());
}

#[test]
fn many_tiny_layers_are_fused() {
    let layers: Vec<LayerSpec> = (0..100).map(|i| linear(Box::leak(format!("l{i}").into_boxed_str()), 4, 4)).collect();
    let s = plan_buckets("Deep", &layers, &config(256, 1024)).unwrap();
    // Each layer is a 16-byte bias, ready first, and a 64-byte weight: l96's bias brings the
    // first bucket to 256 bytes, so it closes with 7 parameters (l96's weight opens the next).
    assert_eq!(s.buckets[0].params.len(), 7);
    assert_eq!(s.param_name(*s.buckets[0].params.last().unwrap()), "l96.bias");
    let (last, full) = s.buckets.split_last().unwrap();
    assert!(full.iter().skip(1).all(|b| (1024..1024 + 64).contains(&b.bytes())), "later buckets close at 1 KiB");
    assert!(last.bytes() < 1024 + 64);
    assert_eq!(s.buckets.iter().map(|b| b.params.len()).sum::<usize>(), 200);
}

#[test]
fn cap_smaller_than_every_parameter_gives_one_bucket_per_parameter() {
    let layers = vec![linear("a", 16, 16), linear("b", 16, 16)];
    let s = plan_buckets("M", &layers, &config(1, 1)).unwrap();
    assert_eq!(member_names(&s), vec![vec!["b.bias"], vec!["b.weight"], vec!["a.bias"], vec!["a.weight"]]);
    let launch: Vec<usize> = s.buckets.iter().map(|b| b.launch_after).collect();
    assert_eq!(launch, vec![1, 1, 0, 0], "weight and bias of one layer launch after the same backward");
}

#[test]
fn parameter_free_layers_take_no_space() {
    let layers = vec![relu("r0"), linear("a", 4, 4), relu("r1"), relu("r2"), linear("b", 4, 4), relu("r3")];
    let s = plan_buckets("M", &layers, &config(4 * 20, 4 * 20)).unwrap();
    assert_eq!(member_names(&s), vec![vec!["b.bias", "b.weight"], vec!["a.bias", "a.weight"]]);
    assert_eq!(s.buckets[0].launch_after, 4);
    assert_eq!(s.buckets[1].launch_after, 1);
    assert!(s.layers[0].params.is_empty());
}

#[test]
fn single_layer() {
    let s = plan_buckets("One", &[linear("only", 3, 2)], &BucketLimits::default()).unwrap();
    assert_eq!(member_names(&s), vec![vec!["only.bias", "only.weight"]]);
    assert_eq!(s.buckets[0].numel, 8);
}

#[test]
fn forced_boundary_starts_a_new_bucket() {
    let layers = vec![linear("a", 4, 4), linear("b", 4, 4).with_bucket_boundary(), linear("c", 4, 4)];
    // The boundary lies between `a` and `b`, whichever way the parameters are walked.
    let s = plan_buckets("M", &layers, &BucketLimits::default()).unwrap();
    assert_eq!(member_names(&s), vec![vec!["c.bias", "c.weight", "b.bias", "b.weight"], vec!["a.bias", "a.weight"]]);
    let s = plan_buckets_in("M", &layers, &BucketLimits::default(), BucketOrder::DdpFirstIteration).unwrap();
    assert_eq!(member_names(&s), vec![vec!["b.weight", "b.bias", "c.weight", "c.bias"], vec!["a.weight", "a.bias"]]);
    // A boundary on the first layer is a no-op, not an empty bucket.
    let layers = vec![linear("a", 4, 4).with_bucket_boundary()];
    for order in [BucketOrder::Ready, BucketOrder::DdpFirstIteration] {
        assert_eq!(plan_buckets_in("M", &layers, &BucketLimits::default(), order).unwrap().buckets.len(), 1);
    }
}

#[test]
fn errors() {
    assert_eq!(plan_buckets("M", &[], &BucketLimits::default()), Err(PlanError::NoLayers));
    assert_eq!(plan_buckets("M", &[relu("r")], &BucketLimits::default()), Err(PlanError::NoParameters));
    assert_eq!(plan_buckets("M", &mlp(), &config(0, MIB)), Err(PlanError::ZeroLimit));
    assert_eq!(plan_buckets("M", &mlp(), &config(MIB, 0)), Err(PlanError::ZeroLimit));
}

#[test]
fn fingerprint_sees_layout_changes() {
    let a = plan_buckets("Mlp", &mlp(), &config(MIB, 8 * MIB)).unwrap();
    let b = plan_buckets("Mlp", &mlp(), &config(MIB, 9 * MIB)).unwrap();
    let mut layers = mlp();
    layers[6] = linear("head", 2048, 11);
    let c = plan_buckets("Mlp", &layers, &config(MIB, 8 * MIB)).unwrap();
    assert_eq!(a.fingerprint(), a.clone().fingerprint());
    assert_ne!(a.fingerprint(), b.fingerprint());
    assert_ne!(a.fingerprint(), c.fingerprint());
}

#[test]
fn table_lists_buckets_in_launch_order() {
    let s = plan_buckets("Mlp", &mlp(), &config(MIB, 8 * MIB)).unwrap();
    let table = s.to_string();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("schedule of Mlp: 3 buckets"), "{table}");
    assert!(
        lines[2].starts_with("b0")
            && lines[2].contains("fc3.backward")
            && lines[2].ends_with("head.bias, head.weight, fc3.bias, fc3.weight")
    );
    assert!(
        lines[4].starts_with("b2") && lines[4].contains("fc1.backward") && lines[4].ends_with("fc1.bias, fc1.weight")
    );
}

#[test]
fn the_table_widens_for_long_block_paths() {
    let layers = vec![linear("encoder.stages.11.blocks.3.mlp.fc", 4, 4), linear("head", 4, 2)];
    let s = plan_buckets("M", &layers, &config(1, 1)).unwrap();
    let table = s.to_string();
    let lines: Vec<&str> = table.lines().filter(|l| l.starts_with('b')).collect();
    assert_eq!(lines.len(), 5, "{table}");
    // The members column starts at one place on every line, the header's included.
    let members_at: Vec<usize> = lines.iter().map(|l| l.find("  members").or_else(|| l.rfind("  ")).unwrap()).collect();
    assert!(members_at.windows(2).all(|w| w[0] == w[1]), "{table}");
}

#[test]
fn each_parameter_knows_its_index_in_definition_order() {
    let layers = vec![linear("a", 4, 4), relu("r"), linear("b", 4, 4), linear("c", 4, 2)];
    for order in [BucketOrder::Ready, BucketOrder::DdpFirstIteration] {
        let s = plan_buckets_in("M", &layers, &config(1, 1), order).unwrap();
        let indices: Vec<usize> = s.params().map(|r| s.param(r).index).collect();
        assert_eq!(indices, (0..6).collect::<Vec<_>>());
    }
}

#[test]
fn without_caps_only_boundaries_close_buckets() {
    let layers = vec![linear("a", 4, 4), linear("b", 4, 4).with_bucket_boundary(), linear("c", 4, 4)];
    let s = plan_buckets("M", &layers, &BucketLimits::Unlimited).unwrap();
    assert_eq!(member_names(&s), vec![vec!["c.bias", "c.weight", "b.bias", "b.weight"], vec!["a.bias", "a.weight"]]);
    assert!(s.to_string().lines().next().unwrap().ends_with("no size caps"), "{s}");
    let capped = plan_buckets("M", &layers, &config(usize::MAX, usize::MAX)).unwrap();
    assert_ne!(s.fingerprint(), capped.fingerprint(), "no caps is not the largest caps");
}

#[test]
fn sizes_past_any_memory_saturate_instead_of_overflowing() {
    // The macro refuses such tensors; a library caller's planner call still ends with a plan.
    let huge =
        LayerSpec::new("huge", "Custom", Width::Preserving).with_param("a", &[1 << 63]).with_param("b", &[1 << 63]);
    let schedule = plan_buckets("M", &[huge], &BucketLimits::Unlimited).unwrap();
    assert_eq!((schedule.buckets[0].numel, schedule.buckets[0].bytes()), (usize::MAX, usize::MAX));
}
