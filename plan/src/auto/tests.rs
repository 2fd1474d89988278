use super::*;
use crate::simulate::sim_buckets;
use crate::{BucketLimits, LowRank, LINK_PRESETS};

const FP32: GradComm = GradComm::Format(WireFormat::Fp32);

fn linear(name: &str, input: usize, output: usize) -> LayerSpec {
    LayerSpec::new(name.to_string(), format!("Linear<{input}, {output}>"), crate::Width::Fixed { input, output })
        .with_param("weight", &[output, input])
        .with_param("bias", &[output])
        .with_flops(2 * (input * output) as u64)
}

fn relu(name: &str) -> LayerSpec {
    LayerSpec::new(name.to_string(), "Relu".to_string(), crate::Width::Preserving)
}

/// The models the planners are compared on.
fn models() -> Vec<(&'static str, Vec<LayerSpec>)> {
    let mlp = vec![
        linear("fc1", 784, 2048),
        relu("a1"),
        linear("fc2", 2048, 2048),
        relu("a2"),
        linear("fc3", 2048, 2048),
        relu("a3"),
        linear("head", 2048, 10),
    ];
    // A wide first layer, then narrow deep layers: uneven sizes.
    let mut uneven = vec![linear("embed", 4096, 1024)];
    for i in 0..10 {
        uneven.push(relu(&format!("a{i}")));
        uneven.push(linear(&format!("fc{i}"), 1024, if i % 3 == 0 { 512 } else { 1024 }).with_flops(0));
    }
    let mut deep = vec![linear("in", 64, 256)];
    for i in 0..24 {
        deep.push(linear(&format!("l{i}"), 256, 256));
    }
    // Fix the chain widths of `uneven` (each layer takes what the previous gave).
    let mut width = 1024;
    for l in uneven.iter_mut().skip(1) {
        if let crate::Width::Fixed { output, .. } = l.width {
            *l = linear(&l.name.clone(), width, output);
            width = output;
        }
    }
    vec![("mlp", mlp), ("uneven", uneven), ("deep", deep)]
}

fn target(layers: &[LayerSpec], link: &str, world: usize) -> Target {
    Target {
        costs: StepCosts::from_flops(layers.iter().map(|l| l.flops_per_sample), 64, 100e9),
        link: Link::preset(link).unwrap(),
        world,
    }
}

fn step_of(schedule: &Schedule, t: &Target) -> f64 {
    simulate(&sim_buckets(schedule), &t.costs, &t.link, t.world, true).step_s
}

#[test]
fn optimal_is_at_least_as_good_as_every_other_plan() {
    for (name, layers) in models() {
        for link in ["ib-hdr", "100gbe", "10gbe"] {
            for world in [2, 8, 64, 1024] {
                let t = target(&layers, link, world);
                let (auto, predicted) = plan_auto(name, &layers, &t, Strategy::Optimal, FP32).unwrap();
                let (mg, _) = plan_auto(name, &layers, &t, Strategy::MgWfbp, FP32).unwrap();
                let ddp = plan_buckets(name, &layers, &BucketLimits::default()).unwrap();
                let best = step_of(&auto, &t);
                assert!((best - predicted.step_s).abs() < 1e-12, "the schedule is the plan that was simulated");
                for (other, schedule) in [("mg-wfbp", &mg), ("ddp 25 MiB", &ddp)] {
                    let s = step_of(schedule, &t);
                    assert!(best <= s * (1.0 + 1e-9), "{name} {link} x{world}: auto {best} vs {other} {s}");
                }
            }
        }
    }
}

#[test]
fn the_dynamic_program_finds_the_exhaustive_optimum() {
    // In every format: PowerSGD's compression runs after each bucket's all-reduce, as the updates do.
    let formats = [
        FP32,
        GradComm::Format(WireFormat::Bf16),
        GradComm::LowRank(LowRank::new(1, 0)),
        GradComm::LowRank(LowRank::new(4, 0)),
    ];
    for (name, layers) in models() {
        for g in formats {
            let p = ParamLayers::of(&layers, g);
            if p.index.len() > EXHAUSTIVE_LAYERS {
                continue;
            }
            for preset in LINK_PRESETS {
                for world in [8, 64, 1024] {
                    let t = target(&layers, preset.name, world);
                    let sim = |starts: &[usize]| simulate(&p.buckets(starts), &t.costs, &t.link, t.world, true).step_s;
                    let (exact, dp) = (sim(&exhaustive_starts(&p, &t)), sim(&dynamic_program_starts(&p, &t)));
                    assert!(
                        dp <= exact * (1.0 + 1e-9),
                        "{name} {g:?} {} x{world}: dp {dp} vs exact {exact}",
                        preset.name
                    );
                }
            }
        }
    }
}

#[test]
fn auto_beats_the_25_mib_cap_on_the_uneven_model() {
    let (_, layers) = models().into_iter().find(|m| m.0 == "uneven").unwrap();
    for link in ["ib-hdr", "100gbe"] {
        for world in [8, 64, 1024] {
            let t = target(&layers, link, world);
            let (auto, _) = plan_auto("uneven", &layers, &t, Strategy::Optimal, FP32).unwrap();
            let ddp = plan_buckets("uneven", &layers, &BucketLimits::default()).unwrap();
            let (a, d) = (step_of(&auto, &t), step_of(&ddp, &t));
            assert!(a < d, "{link} x{world}: auto {a} vs ddp {d}");
        }
    }
}

#[test]
fn boundaries_become_buckets_of_whole_layers() {
    let (_, layers) = models().into_iter().next().unwrap();
    let t = target(&layers, "10gbe", 64);
    let (schedule, _) = plan_auto("mlp", &layers, &t, Strategy::Optimal, FP32).unwrap();
    for bucket in schedule.buckets.iter() {
        // Each bucket holds every parameter of the layers it covers.
        let layers_in: std::collections::BTreeSet<usize> = bucket.params.iter().map(|p| p.layer).collect();
        for l in layers_in {
            assert!(schedule.layers[l].params.iter().all(|p| schedule
                .buckets
                .iter()
                .position(|b| std::ptr::eq(b, bucket))
                == Some(p.bucket)));
        }
    }
    assert_eq!(plan_auto("none", &[relu("a")], &t, Strategy::Optimal, FP32).unwrap_err(), PlanError::NoParameters);
}

/// Whether a bucket of `schedule` holds parameters of layers on both sides of layer `boundary`.
fn spans(schedule: &Schedule, boundary: usize) -> bool {
    schedule
        .buckets
        .iter()
        .any(|b| b.params.iter().any(|p| p.layer < boundary) && b.params.iter().any(|p| p.layer >= boundary))
}

#[test]
fn forced_boundaries_are_kept_by_every_planner() {
    for (name, layers) in models() {
        // On layers with parameters and on activations, which have none.
        let marks = [1, layers.len() / 2 + 1];
        let mut marked = layers.clone();
        for &m in &marks {
            marked[m].bucket_boundary = true;
        }
        let p = ParamLayers::of(&marked, FP32);
        for preset in LINK_PRESETS {
            for world in [2, 64, 1024] {
                let t = target(&marked, preset.name, world);
                let sim = |starts: &[usize]| simulate(&p.buckets(starts), &t.costs, &t.link, t.world, true).step_s;
                for strategy in [Strategy::Optimal, Strategy::MgWfbp] {
                    let (schedule, _) = plan_auto(name, &marked, &t, strategy, FP32).unwrap();
                    for &m in &marks {
                        assert!(
                            !spans(&schedule, m),
                            "{name} {} x{world} {strategy:?}: a bucket spans {m}",
                            preset.name
                        );
                    }
                }
                // Both optimal searches agree, and beat the fewest buckets the boundaries allow.
                let dp = sim(&dynamic_program_starts(&p, &t));
                assert!(dp <= sim(&p.forced_starts()) * (1.0 + 1e-9));
                if p.index.len() <= EXHAUSTIVE_LAYERS {
                    let exact = sim(&exhaustive_starts(&p, &t));
                    assert!(dp <= exact * (1.0 + 1e-9), "{name} {} x{world}: dp {dp} vs exact {exact}", preset.name);
                }
            }
        }
    }
}

#[test]
fn a_boundary_splits_what_auto_would_merge() {
    // Small layers on a slow link: one bucket is best, unless a boundary says otherwise.
    let layers = vec![linear("a", 8, 8), relu("r"), linear("b", 8, 8), linear("c", 8, 8)];
    let t = target(&layers, "10gbe", 64);
    let (merged, _) = plan_auto("m", &layers, &t, Strategy::Optimal, FP32).unwrap();
    assert_eq!(merged.buckets.len(), 1);
    let mut marked = layers.clone();
    marked[1].bucket_boundary = true; // on `r`: `a` apart from `b` and `c`
    let (split, _) = plan_auto("m", &marked, &t, Strategy::Optimal, FP32).unwrap();
    assert_eq!(split.buckets.len(), 2);
    assert!(!spans(&split, 1));
    // Before the first layer with parameters, a boundary separates nothing.
    let mut first = layers.clone();
    first[0].bucket_boundary = true;
    assert_eq!(plan_auto("m", &first, &t, Strategy::Optimal, FP32).unwrap().0.buckets.len(), 1);
}

/// `n` equal layers of `width` (one linear each): the shape on which the dynamic program, keeping
/// for each prefix the plan whose last all-reduce ends first, used to split every layer.
fn equal_layers(n: usize, width: usize) -> Vec<LayerSpec> {
    (0..n).map(|i| linear(&format!("fc{i}"), width, width)).collect()
}

#[test]
fn past_the_exhaustive_search_ties_still_go_to_fewer_buckets() {
    for world in [8, 64] {
        let (exact, past) = (equal_layers(EXHAUSTIVE_LAYERS, 256), equal_layers(EXHAUSTIVE_LAYERS + 1, 256));
        let few = plan_auto("few", &exact, &target(&exact, "ib-hdr", world), Strategy::Optimal, FP32).unwrap();
        let many = plan_auto("many", &past, &target(&past, "ib-hdr", world), Strategy::Optimal, FP32).unwrap();
        // One more equal layer adds at most one bucket to the exhaustive search's choice.
        assert!(many.0.buckets.len() <= few.0.buckets.len() + 1, "x{world}: {} buckets", many.0.buckets.len());
        // And removing any boundary of the dynamic program's plan would lengthen the step.
        let p = ParamLayers::of(&past, FP32);
        let t = target(&past, "ib-hdr", world);
        let starts = optimal_starts(&p, &t);
        let step = |starts: &[usize]| simulate(&p.buckets(starts), &t.costs, &t.link, t.world, true).step_s;
        for k in 1..starts.len() {
            let merged: Vec<usize> = starts.iter().enumerate().filter(|&(i, _)| i != k).map(|(_, &s)| s).collect();
            assert!(step(&merged) > step(&starts) + 1e-12, "x{world}: boundary {} is not needed", starts[k]);
        }
    }
}

#[test]
fn candidates_are_simulated_in_the_format_the_gradients_travel_in() {
    let (_, layers) = models().into_iter().find(|m| m.0 == "mlp").unwrap();
    let t = target(&layers, "10gbe", 8);
    let formats = [FP32, GradComm::Format(WireFormat::Bf16), GradComm::LowRank(LowRank::new(1, 0))];
    let predicted: Vec<f64> =
        formats.iter().map(|&g| plan_auto("mlp", &layers, &t, Strategy::Optimal, g).unwrap().1.comm_s).collect();
    // Half the bytes, then factors: less time on the link at each step down.
    assert!(predicted[1] < predicted[0] && predicted[2] < predicted[1], "all-reduce seconds {predicted:?}");
    // The prediction is that of the schedule the caller gets, with the format applied.
    for g in formats {
        let (schedule, prediction) = plan_auto("mlp", &layers, &t, Strategy::Optimal, g).unwrap();
        let applied = schedule.with_grad_comm(g);
        let step = simulate(&sim_buckets(&applied), &t.costs, &t.link, t.world, true).step_s;
        assert!((step - prediction.step_s).abs() < 1e-12, "{g:?}: {step} vs {}", prediction.step_s);
    }
}
