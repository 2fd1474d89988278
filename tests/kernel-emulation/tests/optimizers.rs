//! The GPU backend's optimizer and clipping kernels, run on the CPU: AdamW bit for bit as our
//! op-by-op reading of PyTorch's CUDA ops rounds it (`pytorch_cuda_step`, read from PyTorch's
//! source: no GPU has written a fixture yet), and within 1e-6 of PyTorch's CPU results, SGD bit for bit as the CPU
//! optimizer (which `runtime/tests/sgd_pytorch.rs` holds to PyTorch's results),
//! and the squared norm's partial sums against f64.

#[path = "../../../runtime/tests/pytorch_adamw/mod.rs"]
mod pytorch_adamw;

use kernel_emulation::launch_shapes::{clip, elementwise, CLIP_BLOCKS, THREADS};
use kernel_emulation::{self as emu, Shape};
use overlap_runtime::{InitRng, Optimizer, Sgd};

fn relative(got: &[f32], want: &[f32]) -> f64 {
    let diff: f64 = got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - f64::from(w)).powi(2)).sum();
    let norm: f64 = want.iter().map(|&w| f64::from(w).powi(2)).sum();
    (diff / norm.max(1e-30)).sqrt()
}

#[test]
fn adamw_kernel_rounds_as_pytorchs_cuda_ops_read_op_by_op() {
    pytorch_adamw::check_cuda_kernel(|step, before, grad| {
        let mut after = before.clone();
        let state = (&mut after.value[..], &mut after.exp_avg[..], &mut after.exp_avg_sq[..]);
        emu::adamw_update(elementwise(before.value.len()), step, state, grad, 1.0);
        after
    });
}

#[test]
fn sgd_kernel_gives_the_cpu_optimizers_bits_over_three_steps() {
    let n = 1000;
    let mut rng = InitRng::new(21);
    let start = rng.uniform(n, 1.0);
    let grads: Vec<Vec<f32>> = (0..3).map(|_| rng.uniform(n, 1.0)).collect();
    for (momentum, dampening, nesterov, weight_decay) in
        [(0.0, 0.0, false, 0.0), (0.9, 0.1, false, 0.01), (0.9, 0.0, true, 0.05)]
    {
        let mut cpu =
            Sgd::new(0.1).momentum(momentum).dampening(dampening).nesterov(nesterov).weight_decay(weight_decay);
        let (mut want, mut got, mut buffer) = (start.clone(), start.clone(), vec![0.0; n]);
        for (step, grad) in grads.iter().enumerate() {
            cpu.begin_step();
            cpu.update(0, &mut want, grad, 0.5);
            let shape = if step == 1 { Shape { grid: 1, block: THREADS } } else { elementwise(n) };
            emu::sgd_update(shape, cpu.rule_for(0), (&mut got, &mut buffer), grad, step == 0, 0.5);
            let at = format!("momentum {momentum}, dampening {dampening}, nesterov {nesterov}, step {step}");
            assert!(got == want, "{at}: {:e} from the CPU", relative(&got, &want));
            if momentum != 0.0 {
                let cpu_buffer = cpu.momentum_buffer(0).expect("the CPU keeps a buffer");
                assert!(buffer == cpu_buffer, "{at}: momentum buffer {:e} from the CPU", relative(&buffer, cpu_buffer));
            }
        }
    }
}

#[test]
fn squared_norm_partials_add_up_to_the_f64_sum() {
    for n in [1, 255, 100_003] {
        let x = InitRng::new(22).uniform(n, 3.0);
        let mut partials = vec![f64::NAN; CLIP_BLOCKS];
        emu::sum_squares(clip(), &x, &mut partials);
        let want: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let got: f64 = partials.iter().sum();
        assert!((got - want).abs() <= 1e-12 * want, "{n} elements: {got} against {want}");
    }
}
