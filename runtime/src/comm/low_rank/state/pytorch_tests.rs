//! The passes against PyTorch's own `powerSGD_hook` (`runtime/tests/fixtures/powersgd_pytorch.json`,
//! written by `powersgd_pytorch.py`: DDP on gloo, one process): from the Q the hook drew at its
//! first compressed step, our state, handed the same gradients step after step, hands back what
//! the hook handed back: the values it sends whole (vectors, a matrix at the compression rate's
//! boundary, one below it) unchanged, each factorised matrix's M̂, with the error feedback and
//! the warm start carried from step to step.

use std::collections::HashMap;

use serde_json::Value;

use super::*;
use overlap_plan::{plan_buckets, BucketLimits, GradComm, LayerSpec, Width};

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("a list").iter().map(|x| x.as_f64().expect("a number") as f32).collect()
}

/// The fixture's model, planned as ours plans it: the same four `Linear` layers, one bucket.
fn schedule() -> Schedule {
    let linear = |name: &'static str, input: usize, output: usize| {
        LayerSpec::new(name, "Linear", Width::Fixed { input, output })
            .with_param("weight", &[output, input])
            .with_param("bias", &[output])
    };
    let layers = [linear("fc1", 24, 32), linear("mid", 32, 8), linear("sq", 8, 8), linear("head", 8, 5)];
    plan_buckets("Net", &layers, &BucketLimits::Unlimited).unwrap()
}

#[test]
fn our_state_hands_back_what_pytorchs_hook_hands_back_step_after_step() {
    let fixture: Value =
        serde_json::from_str(include_str!("../../../../tests/fixtures/powersgd_pytorch.json")).expect("JSON");
    let rank = fixture["rank"].as_u64().unwrap() as usize;
    let spec = LowRank::new(rank, fixture["start_iter"].as_u64().unwrap());
    let s = schedule().with_grad_comm(GradComm::LowRank(spec));
    assert_eq!(s.buckets.len(), 1);
    let mut state = LowRankState::new(&s, 0, spec);
    // Where each parameter lies in our bucket, by the names the hook's bucket gives.
    let ours: HashMap<String, Range<usize>> = s.buckets[0]
        .params
        .iter()
        .map(|&p| (s.param_name(p), s.param(p).offset..s.param(p).offset + s.param(p).numel()))
        .collect();
    // The hook's draw, each Q `cols x rank` row-major, in the order of its compressed matrices:
    // ours, stored transposed, in the same order.
    let draws: Vec<Vec<f32>> = fixture["first_q"].as_array().unwrap().iter().map(floats).collect();
    assert_eq!(draws.len(), state.matrices.len(), "the hook compresses the matrices we factorise");
    let mut q = Vec::new();
    for (m, draw) in state.matrices.iter().zip(&draws) {
        assert_eq!(draw.len(), m.cols * rank);
        q.extend((0..rank).flat_map(|c| (0..m.cols).map(move |i| draw[i * rank + c])));
    }
    assert!(state.restore_warm_start(&q, 0));

    let mut grads = vec![0.0f32; s.buckets[0].numel];
    let steps = fixture["steps"].as_array().unwrap();
    let mut compressed = 0;
    for (k, step) in steps.iter().enumerate() {
        let names: Vec<&str> = step["params"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        let (input, output) = (floats(&step["input"]), floats(&step["output"]));
        // The bucket starts the step cleared, holding last step's errors; backward adds.
        grads.fill(0.0);
        state.restore_aside(&mut grads);
        let mut at = 0;
        for name in &names {
            let range = ours[*name].clone();
            grads[range.clone()].iter_mut().zip(&input[at..at + range.len()]).for_each(|(g, x)| *g += x);
            at += range.len();
        }
        assert_eq!(at, input.len(), "step {}: the hook's bucket is ours", k + 1);
        if state.begin_step(1) {
            compressed += 1;
            let p = state.compress(&grads);
            let q = state.project(&grads, p);
            state.decompress(&mut grads, &mut Lent::default(), q);
        }
        let mut at = 0;
        for name in &names {
            let range = ours[*name].clone();
            let (got, want) = (&grads[range.clone()], &output[at..at + range.len()]);
            at += range.len();
            let diff = got.iter().zip(want).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>().sqrt();
            let norm = want.iter().map(|b| f64::from(*b).powi(2)).sum::<f64>().sqrt();
            let factorised = state.matrices.iter().any(|m| m.offset == range.start);
            let what = format!("step {}, {name} ({})", k + 1, if factorised { "M̂" } else { "sent whole" });
            if factorised {
                assert!(diff <= 2e-5 * norm.max(1e-6), "{what}: off by {diff:e} (norm {norm:e})");
            } else {
                assert_eq!(got, want, "{what}");
            }
        }
    }
    assert_eq!(compressed, steps.len() - spec.start_iter as usize, "steps after start_iter compress");
}
