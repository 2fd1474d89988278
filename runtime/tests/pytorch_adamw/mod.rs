//! PyTorch's AdamW for the tests that hold the optimizer to it: the fixture real PyTorch wrote
//! (`fixtures/adamw_pytorch.py`: a state after 1000 steps, then the next steps' gradients and
//! results), and `torch.optim.AdamW`'s single-tensor path transcribed op by op, its Python
//! floats as f64, each rounded to f32 by the tensor op that takes it.

#![allow(dead_code)] // each test target uses a part

use serde_json::Value;

/// AdamW's hyperparameters, as Python floats.
#[derive(Clone, Copy, Debug)]
pub struct Hyper {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// One parameter's values and moments.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensors {
    pub value: Vec<f32>,
    pub exp_avg: Vec<f32>,
    pub exp_avg_sq: Vec<f32>,
}

/// One parameter in one recorded step: its gradient, PyTorch's tensors after the step, and
/// PyTorch's `exp_avg_sq.sqrt()` in it (MKL's: not always the correctly rounded root).
#[derive(Clone, Debug)]
pub struct Recorded {
    pub grad: Vec<f32>,
    pub after: Tensors,
    pub sqrt: Vec<f32>,
}

/// One fixture case: PyTorch's state after `step` steps, then per recorded step each
/// parameter's gradient and results.
pub struct Case {
    pub name: String,
    pub hyper: Hyper,
    pub step: u64,
    pub names: Vec<String>,
    pub state: Vec<Tensors>,
    pub steps: Vec<Vec<Recorded>>,
}

impl Case {
    /// PyTorch's state before recorded step `k` (0-based): the handed-over state or the
    /// previous step's results.
    pub fn before(&self, k: usize) -> Vec<Tensors> {
        match k {
            0 => self.state.clone(),
            _ => self.steps[k - 1].iter().map(|r| r.after.clone()).collect(),
        }
    }

    /// `state['step']` during recorded step `k`.
    pub fn step_number(&self, k: usize) -> u64 {
        self.step + 1 + k as u64
    }
}

/// The fixture's cases (built into the test, so that a test binary run elsewhere has it).
pub fn cases() -> Vec<Case> {
    let fixture: Value = serde_json::from_str(include_str!("../fixtures/adamw_pytorch.json")).unwrap();
    fixture["cases"].as_array().unwrap().iter().map(case).collect()
}

fn case(c: &Value) -> Case {
    let betas = floats64(&c["betas"]);
    let state = &c["state"];
    let params = state["params"].as_array().unwrap();
    Case {
        name: c["name"].as_str().unwrap().to_string(),
        hyper: Hyper {
            lr: c["lr"].as_f64().unwrap(),
            beta1: betas[0],
            beta2: betas[1],
            eps: c["eps"].as_f64().unwrap(),
            weight_decay: c["weight_decay"].as_f64().unwrap(),
        },
        step: state["step"].as_u64().unwrap(),
        names: params.iter().map(|p| p["name"].as_str().unwrap().to_string()).collect(),
        state: params.iter().map(tensors).collect(),
        steps: c["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_array().unwrap().iter().map(recorded).collect())
            .collect(),
    }
}

fn recorded(p: &Value) -> Recorded {
    Recorded { grad: floats(&p["grad"]), after: tensors(p), sqrt: floats(&p["sqrt"]) }
}

fn tensors(p: &Value) -> Tensors {
    Tensors { value: floats(&p["value"]), exp_avg: floats(&p["exp_avg"]), exp_avg_sq: floats(&p["exp_avg_sq"]) }
}

fn floats64(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// PyTorch printed each f32 as the f64 it widens to: the nearest f32 is that value.
fn floats(v: &Value) -> Vec<f32> {
    floats64(v).into_iter().map(|x| x as f32).collect()
}

extern "C" {
    /// C's `pow`, which Python's `**` on two floats calls.
    fn pow(x: f64, y: f64) -> f64;
}

fn py_pow(x: f64, y: f64) -> f64 {
    // SAFETY: libm's pow is a pure function of two doubles.
    unsafe { pow(x, y) }
}

/// One step of `_single_tensor_adam` (decoupled weight decay, no amsgrad, not capturable) on one
/// float32 CPU parameter; `step` is `state['step']` after its increment. The tensor ops round as
/// PyTorch's AVX2 and AVX-512 kernels do; `sqrt` is the root of the updated `exp_avg_sq` when
/// PyTorch's is known, and otherwise the correctly rounded one is taken.
pub fn pytorch_step(h: Hyper, step: u64, t: &mut Tensors, grad: &[f32], sqrt: Option<&[f32]>) {
    if h.weight_decay != 0.0 {
        mul_(&mut t.value, 1.0 - h.lr * h.weight_decay);
    }
    lerp_(&mut t.exp_avg, grad, 1.0 - h.beta1);
    mul_(&mut t.exp_avg_sq, h.beta2);
    addcmul_(&mut t.exp_avg_sq, grad, grad, 1.0 - h.beta2);
    let (step_size, bias_correction2_sqrt) = bias_corrections(h, step);
    let mut denom: Vec<f32> = match sqrt {
        Some(roots) => roots.to_vec(),
        None => t.exp_avg_sq.iter().map(|v| v.sqrt()).collect(),
    };
    div_(&mut denom, bias_correction2_sqrt);
    add_(&mut denom, h.eps);
    addcdiv_(&mut t.value, &t.exp_avg, &denom, -step_size);
}

/// `step_size` and `bias_correction2_sqrt`, Python floats.
fn bias_corrections(h: Hyper, step: u64) -> (f64, f64) {
    let step = step as f64; // `_get_value(step_t)`: a Python float
    let bias_correction1 = 1.0 - py_pow(h.beta1, step);
    let bias_correction2 = 1.0 - py_pow(h.beta2, step);
    (h.lr / bias_correction1, py_pow(bias_correction2, 0.5))
}

/// The same step on a CUDA float32 parameter, as PyTorch's CUDA kernels round it, read from its
/// source (no fixture from a GPU holds this to PyTorch's own results yet): `lerp_` as on
/// the CPU (nvcc fuses it alike); `addcmul_` and `addcdiv_` as `fma(value, t1 op t2, self)`
/// (`pointwise_op_impl`); a division by a CPU scalar as a product with its f32 reciprocal
/// (`div_true_kernel_cuda`); the root correctly rounded.
pub fn pytorch_cuda_step(h: Hyper, step: u64, t: &mut Tensors, grad: &[f32]) {
    if h.weight_decay != 0.0 {
        mul_(&mut t.value, 1.0 - h.lr * h.weight_decay);
    }
    lerp_(&mut t.exp_avg, grad, 1.0 - h.beta1);
    mul_(&mut t.exp_avg_sq, h.beta2);
    let value = scalar(1.0 - h.beta2);
    for (v, &g) in t.exp_avg_sq.iter_mut().zip(grad) {
        // A value of 1 is fused into the product itself.
        *v = if value == 1.0 { g.mul_add(g, *v) } else { value.mul_add(g * g, *v) };
    }
    let (step_size, bias_correction2_sqrt) = bias_corrections(h, step);
    let reciprocal = 1.0 / scalar(bias_correction2_sqrt);
    let value = scalar(-step_size);
    for ((p, &m), &v) in t.value.iter_mut().zip(&t.exp_avg).zip(&t.exp_avg_sq) {
        let denom = v.sqrt() * reciprocal + scalar(h.eps);
        *p = value.mul_add(m / denom, *p);
    }
}

/// A Python float scalar meets a float32 tensor: PyTorch casts it to the op's f32 once.
fn scalar(x: f64) -> f32 {
    x as f32
}

fn mul_(t: &mut [f32], s: f64) {
    t.iter_mut().for_each(|x| *x *= scalar(s));
}

fn div_(t: &mut [f32], s: f64) {
    t.iter_mut().for_each(|x| *x /= scalar(s));
}

fn add_(t: &mut [f32], s: f64) {
    t.iter_mut().for_each(|x| *x += scalar(s));
}

/// `lerp_vec`: `fmadd(coeff, end - start, base)` from the nearer end.
fn lerp_(t: &mut [f32], end: &[f32], weight: f64) {
    let w = scalar(weight);
    for (x, &e) in t.iter_mut().zip(end) {
        *x = if w.abs() < 0.5 { w.mul_add(e - *x, *x) } else { (w - 1.0).mul_add(e - *x, e) };
    }
}

/// `self + value * t1 * t2`, which the compiler fuses into `fma(value * t1, t2, self)`.
fn addcmul_(t: &mut [f32], t1: &[f32], t2: &[f32], value: f64) {
    for ((x, &a), &b) in t.iter_mut().zip(t1).zip(t2) {
        *x = (scalar(value) * a).mul_add(b, *x);
    }
}

/// `self + value * t1 / t2`: nothing to fuse.
fn addcdiv_(t: &mut [f32], t1: &[f32], t2: &[f32], value: f64) {
    for ((x, &a), &b) in t.iter_mut().zip(t1).zip(t2) {
        *x += scalar(value) * a / b;
    }
}

/// Holds an AdamW kernel to PyTorch's CUDA rounding: `update(coefficients, state, grad)` returns
/// the state one step after `state`. Over every recorded step it must give the bits
/// `pytorch_cuda_step` gives, and stay within 1e-6 (relative) of PyTorch's CPU results. Returns
/// how many parameter steps it compared.
pub fn check_cuda_kernel(
    mut update: impl FnMut(overlap_runtime::optim::AdamWStep, &Tensors, &[f32]) -> Tensors,
) -> usize {
    use overlap_runtime::Optimizer;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let relative = |a: &[f32], b: &[f32]| {
        let diff: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>().sqrt();
        diff / norm.max(f64::MIN_POSITIVE)
    };
    let mut compared = 0;
    for case in cases() {
        let h = case.hyper;
        for k in 0..case.steps.len() {
            let mut opt =
                overlap_runtime::AdamW::new(h.lr).betas(h.beta1, h.beta2).eps(h.eps).weight_decay(h.weight_decay);
            opt.set_step_count(case.step_number(k) - 1);
            opt.begin_step();
            for (before, recorded) in case.before(k).into_iter().zip(&case.steps[k]) {
                let got = update(opt.current_step(), &before, &recorded.grad);
                let mut want = before.clone();
                pytorch_cuda_step(h, case.step_number(k), &mut want, &recorded.grad);
                let at = format!("{}, step {}", case.name, case.step_number(k));
                for (g, w) in pairs(&got, &want) {
                    assert_eq!(bits(g), bits(w), "{at}: the kernel rounds otherwise than PyTorch's CUDA ops");
                }
                for (g, w) in pairs(&got, &recorded.after) {
                    assert!(relative(g, w) <= 1e-6, "{at}: {:e} from PyTorch's CPU results", relative(g, w));
                }
                compared += 1;
            }
        }
    }
    assert!(compared > 0, "the fixture holds no steps");
    compared
}

/// The three tensors of `got` beside those of `want`.
fn pairs<'a>(got: &'a Tensors, want: &'a Tensors) -> [(&'a [f32], &'a [f32]); 3] {
    [(&got.value, &want.value), (&got.exp_avg, &want.exp_avg), (&got.exp_avg_sq, &want.exp_avg_sq)]
}
