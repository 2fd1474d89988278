//! Clipping by the global gradient norm (`OptimizerConfig::clip_grad_norm`) as PyTorch's
//! `clip_grad_norm_` between backward and `step()`: the norms PyTorch returned and its final
//! parameters (`fixtures/clip_grad_norm.json`, written by `fixtures/clip_grad_norm.py`), with
//! AdamW and SGD, over clipped and unclipped steps; the `Trainer` runs the same steps; a
//! threshold never reached changes no bit; and 2 ranks clip as 1 does on the same global batch.

mod common;

use overlap::prelude::*;
use overlap::{Batch, Dataset, ReportFormat};
use serde_json::Value;

#[distributed_model(bucket_cap_mb = 0.0002, first_bucket_mb = 0.0002)]
pub struct Tiny {
    fc1: Linear<6, 16>,
    act: Relu,
    head: Linear<16, 3>,
}

fn fixture() -> Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/clip_grad_norm.json"))
        .expect("the fixture is in the repository");
    serde_json::from_str(&text).expect("the fixture is JSON")
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// The model with PyTorch's initial parameters (the same names, the same `[out, in]` layout).
fn from_pytorch(f: &Value) -> Tiny {
    let mut model = Tiny::new(&Communicator::single(), 0).unwrap();
    for p in Tiny::SCHEDULE.params() {
        let name = Tiny::SCHEDULE.param_name(p);
        model.param_mut(p).copy_from_slice(&floats(&f["initial"][&name]));
    }
    model
}

fn params(model: &Tiny) -> Vec<(String, Vec<f32>)> {
    Tiny::SCHEDULE.params().map(|p| (Tiny::SCHEDULE.param_name(p), model.param(p).to_vec())).collect()
}

/// The fixture's batches, in order.
struct Recorded {
    inputs: Vec<f32>,
    labels: Vec<usize>,
}

impl Dataset for Recorded {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        let first = first as usize;
        batch.inputs = Matrix::from_vec(rows, 6, self.inputs[first * 6..(first + rows) * 6].to_vec());
        batch.labels = self.labels[first..first + rows].to_vec();
        Ok(())
    }
    fn features(&self) -> usize {
        6
    }
    fn describe(&self) -> String {
        "clip_grad_norm.json".into()
    }
}

fn recorded(f: &Value) -> Recorded {
    let labels = f["labels"].as_array().unwrap().iter().map(|l| l.as_u64().unwrap() as usize).collect();
    Recorded { inputs: floats(&f["inputs"]), labels }
}

fn config(case: &Value, max_norm: Option<f64>) -> OptimizerConfig {
    let lr = case["lr"].as_f64().unwrap();
    let config = match case["optimizer"].as_str().unwrap() {
        "adamw" => OptimizerConfig::adamw(lr).weight_decay(case["weight_decay"].as_f64().unwrap()),
        _ => OptimizerConfig::sgd(lr).momentum(case["momentum"].as_f64().unwrap()),
    };
    OptimizerConfig { clip_grad_norm: max_norm, ..config }
}

/// The fixture's steps by hand: each step's norm before clipping, and the final parameters.
fn by_hand(f: &Value, case: &Value) -> (Vec<f32>, Tiny) {
    let mut model = from_pytorch(f);
    let mut data = recorded(f);
    let batch_size = f["batch"].as_u64().unwrap() as usize;
    let mut optimizer = config(case, f["max_norm"].as_f64()).build(&Tiny::SCHEDULE);
    let (comm, mut grads, mut ws) = (Communicator::single(), model.new_grads(), TinyWorkspace::default());
    let (mut batch, mut dlogits, mut norms) = (Batch::default(), Matrix::default(), Vec::new());
    for step in 0..data.labels.len() / batch_size {
        data.fill((step * batch_size) as u64, batch_size, &mut batch).unwrap();
        let logits = model.forward(&batch.inputs, &mut ws);
        CrossEntropyLoss.forward_backward(logits, &batch.labels, &mut dlogits);
        let in_flight = model.backward(&mut ws, &dlogits, grads, &comm, &mut optimizer);
        grads = model.step(in_flight, &mut optimizer).unwrap();
        norms.push(optimizer.grad_clip().and_then(|c| c.last_norm()).expect("the run clips"));
    }
    (norms, model)
}

fn relative_difference(a: &[f32], b: &[f32]) -> f64 {
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2)).sum();
    let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    (diff / norm.max(1e-30)).sqrt()
}

#[test]
fn matches_pytorchs_norms_and_parameters() {
    let f = fixture();
    let max_norm = f["max_norm"].as_f64().unwrap() as f32;
    for case in f["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let want = floats(&case["norms"]);
        let clipped = want.iter().filter(|&&n| n > max_norm).count();
        assert!(clipped > 0 && clipped < want.len(), "{name}: the fixture has clipped and unclipped steps");
        let (norms, model) = by_hand(&f, case);
        for (step, (got, want)) in norms.iter().zip(&want).enumerate() {
            assert!((got - want).abs() <= 1e-5 * want, "{name}, step {}: norm {got}, PyTorch's {want}", step + 1);
        }
        for (param, value) in params(&model) {
            let d = relative_difference(&value, &floats(&case["final"][&param]));
            println!("{name}: {param} within {d:.1e} of PyTorch's after {} steps", want.len());
            assert!(d < 1e-5, "{name}: {param} differs from PyTorch's by {d:e}");
        }
        // Without clipping the same steps end elsewhere: the comparison can fail.
        let unclipped = {
            let mut model = from_pytorch(&f);
            Trainer::new(&Communicator::single())
                .steps(want.len() as u64)
                .batch(f["batch"].as_u64().unwrap() as usize)
                .optimizer(config(case, None))
                .report(ReportFormat::Off, None)
                .fit(&mut model, &mut recorded(&f), &CrossEntropyLoss)
                .unwrap();
            model
        };
        let d = relative_difference(&params(&unclipped)[0].1, &floats(&case["final"]["fc1.weight"]));
        assert!(d > 1e-3, "{name}: unclipped training lands within {d:e} of the clipped result");
    }
}

#[test]
fn the_trainer_clips_as_the_steps_by_hand() {
    let f = fixture();
    for case in f["cases"].as_array().unwrap() {
        let (norms, by_hand) = by_hand(&f, case);
        let mut model = from_pytorch(&f);
        Trainer::new(&Communicator::single())
            .steps(norms.len() as u64)
            .batch(f["batch"].as_u64().unwrap() as usize)
            .optimizer(config(case, f["max_norm"].as_f64()))
            .report(ReportFormat::Off, None)
            .fit(&mut model, &mut recorded(&f), &CrossEntropyLoss)
            .unwrap();
        assert_eq!(params(&model), params(&by_hand), "{}", case["name"]);
    }
}

/// A threshold above every norm: the clipping factor is 1 and the updates (after the wait
/// points, nothing lent) give the bits of the unclipped run (updates lent to the all-reduce).
#[test]
fn a_threshold_never_reached_changes_nothing() {
    let f = fixture();
    for case in f["cases"].as_array().unwrap() {
        let run = |max_norm| {
            let mut model = from_pytorch(&f);
            Trainer::new(&Communicator::single())
                .steps(8)
                .batch(8)
                .optimizer(config(case, max_norm))
                .report(ReportFormat::Off, None)
                .fit(&mut model, &mut recorded(&f), &CrossEntropyLoss)
                .unwrap();
            params(&model)
        };
        assert_eq!(run(Some(1e6)), run(None), "{}", case["name"]);
    }
}

#[test]
fn a_threshold_that_is_not_positive_is_refused_by_name() {
    let f = fixture();
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let mut model = from_pytorch(&f);
        let e = Trainer::new(&Communicator::single())
            .steps(1)
            .batch(8)
            .optimizer(OptimizerConfig::adamw(1e-3).clip_grad_norm(bad))
            .report(ReportFormat::Off, None)
            .fit(&mut model, &mut recorded(&f), &CrossEntropyLoss)
            .unwrap_err();
        assert!(e.to_string().contains(&format!("`OptimizerConfig::clip_grad_norm` {bad}")), "{e}");
    }
}

/// 2 ranks sum their halves of the batch before the norm: the same norms and parameters as one
/// process on the whole batch, with the norm on the log lines.
#[test]
fn two_ranks_clip_as_one_on_the_same_global_batch() {
    if !common::mpirun_available() {
        return;
    }
    let root = common::scratch("clip");
    let exe = common::example("resmlp");
    let run = |ranks: usize, batch: &str| {
        let out = root.path().join(format!("{ranks}.safetensors"));
        let n = ranks.to_string();
        let log = common::mpirun_ok(&[
            "-n",
            &n,
            exe.to_str().unwrap(),
            "--steps",
            "4",
            "--batch",
            batch,
            "--optimizer",
            "adamw",
            "--lr",
            "0.001",
            "--clip-grad-norm",
            "0.5",
            "--log-every",
            "1",
            "--report",
            "off",
            "--save-params",
            out.to_str().unwrap(),
        ]);
        (log, common::load_sorted_params(&out))
    };
    let (log1, one) = run(1, "8");
    let (log2, two) = run(2, "4");
    let norms = |log: &str| -> Vec<f64> {
        let logged = log.lines().filter_map(|l| l.split("grad norm ").nth(1));
        logged.map(|n| n.split_whitespace().next().unwrap().parse().unwrap()).collect()
    };
    let (norms1, norms2) = (norms(&log1), norms(&log2));
    assert_eq!(norms1.len(), 4, "a norm on every log line: {log1}");
    assert_eq!(norms2.len(), 4, "a norm on every log line of 2 ranks: {log2}");
    assert!(norms1.iter().any(|&n| n > 0.5), "the threshold clips: {norms1:?}");
    for (a, b) in norms1.iter().zip(&norms2) {
        assert!((a - b).abs() <= 1e-5 * a + 2e-3, "1 rank's norms {norms1:?}, 2 ranks' {norms2:?}");
    }
    let d = common::max_relative_difference(&two, &one);
    assert!(d < 1e-5, "2 ranks differ from 1 by {d:e}");
}
