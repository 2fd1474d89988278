//! `Sgd` follows `torch.optim.SGD` wherever its options change the rule: momentum, dampening,
//! Nesterov and weight decay, alone and together. Checked against PyTorch's own results
//! (`fixtures/sgd_pytorch.json`, written by `fixtures/sgd_pytorch.py`): from the same start and
//! the same gradients, the parameter and the momentum buffer after every step, bit for bit.

use overlap_runtime::optim::{Optimizer, Sgd};
use serde_json::Value;

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("a list").iter().map(|x| x.as_f64().expect("a number") as f32).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `Sgd` with the settings of a case (PyTorch's defaults where the case names none).
fn sgd(case: &Value) -> Sgd {
    let number = |key: &str| case[key].as_f64().map(|x| x as f32);
    Sgd::new(number("lr").expect("a learning rate"))
        .momentum(number("momentum").unwrap_or(0.0))
        // A Python float, as PyTorch takes it: `1 - dampening` is taken before rounding to f32.
        .dampening(case["dampening"].as_f64().unwrap_or(0.0))
        .weight_decay(number("weight_decay").unwrap_or(0.0))
        .nesterov(case["nesterov"].as_bool().unwrap_or(false))
}

#[test]
fn every_option_of_torch_optim_sgd_gives_pytorchs_bits_step_after_step() {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/sgd_pytorch.json")).expect("the fixture parses");
    let start = floats(&fixture["start"]);
    let grads: Vec<Vec<f32>> = fixture["grads"].as_array().expect("gradients").iter().map(floats).collect();
    let cases = fixture["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 9, "every combination the script writes");
    for case in cases {
        let name = case["name"].as_str().expect("a name");
        let mut opt = sgd(case);
        let mut value = start.clone();
        let (values, buffers) = (case["values"].as_array().unwrap(), case["momentum_buffers"].as_array().unwrap());
        assert_eq!((values.len(), buffers.len()), (grads.len(), grads.len()), "{name}: a record per step");
        for (step, grad) in grads.iter().enumerate() {
            opt.begin_step();
            opt.update(0, &mut value, grad, 1.0);
            assert_eq!(bits(&value), bits(&floats(&values[step])), "{name}, step {}: parameter", step + 1);
            let buffer = opt.momentum_buffer(0).map(<[f32]>::to_vec);
            let theirs = (!buffers[step].is_null()).then(|| floats(&buffers[step]));
            assert_eq!(
                buffer.as_deref().map(bits),
                theirs.as_deref().map(bits),
                "{name}, step {}: momentum buffer",
                step + 1
            );
        }
        assert_ne!(value, start, "{name}: the steps moved the parameter");
    }
}
