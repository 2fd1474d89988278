//! The CUDA backend against the CPU one. Built with `--features cuda`. Without a driver only the
//! tests that need no GPU run (the first checks the error users get); the others need an NVIDIA
//! GPU and are ignored unless asked for (`scripts/gpu-check.sh` runs them with
//! `--include-ignored`, from the bundle `scripts/gpu-bundle.sh` builds).

#[path = "../common/mod.rs"]
mod common;
mod gradients;
mod models;
#[path = "../../runtime/tests/pytorch_adamw/mod.rs"]
mod pytorch_adamw;
mod ranks;
mod training;

use overlap::cuda::{driver_present, Gpu};
use overlap::prelude::*;
use overlap::{Device, Matrix, ReportFormat};

use models::{residual_net, Probe};

/// `|a - b| / |b|`, Euclidean norms.
fn relative(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let diff: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum::<f64>().sqrt();
    let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>().sqrt();
    diff / norm.max(f64::MIN_POSITIVE)
}

#[test]
fn without_a_driver_the_error_says_so_and_with_one_the_gpu_opens() {
    match Gpu::open(0) {
        Err(e) if !driver_present() => {
            let message = e.to_string();
            assert!(message.contains("no CUDA driver found"), "{message}");
            println!("no CUDA driver here: {message}");
        }
        Err(e) => panic!("a driver is present but GPU 0 does not open: {e}"),
        Ok(gpu) => {
            assert!(driver_present());
            println!("opened {}", gpu.describe());
        }
    }
}

/// A user layer without device kernels (it keeps the default `DEVICE_OP`).
pub struct Halve;

impl Layer for Halve {
    const PARAMS: &'static [overlap::ParamDef] = &[];
    const WIDTH: overlap::Width = overlap::Width::Preserving;
    type Saved = ();
    fn init(_: &mut overlap::InitRng) -> Self {
        Halve
    }
    fn param(&self, _: usize) -> &[f32] {
        &[]
    }
    fn param_mut(&mut self, _: usize) -> &mut [f32] {
        &mut []
    }
    fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        output.clone_from(input);
        output.as_mut_slice().iter_mut().for_each(|v| *v *= 0.5);
    }
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        _: &StepContext,
        _: &Matrix,
        _: &Matrix,
        _: &(),
        dy: &Matrix,
        _: &mut [&mut [f32]],
        _: bool,
        dx: Option<&mut Matrix>,
    ) {
        if let Some(dx) = dx {
            dx.clone_from(dy);
            dx.as_mut_slice().iter_mut().for_each(|v| *v *= 0.5);
        }
    }
}

#[distributed_model]
pub struct WithUserLayer {
    fc: Linear<8, 8>,
    #[layer(params())]
    halve: Halve,
    head: Linear<8, 2>,
}

#[test]
fn a_layer_without_device_kernels_is_refused_by_name_without_a_gpu() {
    overlap::cuda::check_supported::<Probe>().expect("every built-in layer runs on the GPU");
    let message = overlap::cuda::check_supported::<WithUserLayer>().unwrap_err().to_string();
    assert!(message.contains("`halve` (Halve)") && message.contains("`TrainConfig::device` cpu"), "{message}");
    assert!(!message.contains("`fc`"), "{message}");
}

/// An embedding after a layer of one's own, which the macro accepts (such a layer may output token
/// ids): on the GPU its ids would come from that layer, unchecked.
#[distributed_model]
pub struct LaterEmbedding {
    #[layer(params())]
    halve: Halve,
    wte: Embedding<16, 8>,
    head: Linear<8, 2>,
}

#[test]
fn an_embedding_that_is_not_the_first_layer_is_refused_by_name_without_a_gpu() {
    let message = overlap::cuda::check_supported::<LaterEmbedding>().unwrap_err().to_string();
    assert!(message.contains("its embedding `wte` is not its first layer"), "{message}");
    assert!(message.contains("`TrainConfig::device` cpu"), "{message}");
}

/// Labels past the model's classes, as a user's own dataset may give them.
struct PastTheClasses;

impl overlap::Dataset for PastTheClasses {
    fn fill(&mut self, _first: u64, rows: usize, batch: &mut overlap::Batch) -> overlap::Result<()> {
        batch.inputs.resize(rows, 16);
        batch.inputs.as_mut_slice().fill(0.5);
        batch.labels = (0..rows).map(|r| if r == 3 { 5 } else { 1 }).collect();
        Ok(())
    }

    fn features(&self) -> usize {
        16
    }
}

/// The GPU's loss kernel reads the logit a label names: a label past the classes is the CPU's
/// error on the GPU too, at the step that reads it, not a read past the row.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh runs it)"]
fn a_label_past_the_classes_is_the_cpus_error_on_the_gpu() {
    let comm = Communicator::single();
    let messages: Vec<String> = [Device::Cpu, Device::Cuda { gpu: Some(0) }]
        .into_iter()
        .map(|device| {
            let mut model = Probe::new(&comm, 1).unwrap();
            let trainer = Trainer::new(&comm).steps(1).batch(4).device(device).report(ReportFormat::Off, None);
            let error = trainer.fit(&mut model, &mut PastTheClasses, &CrossEntropyLoss).unwrap_err();
            error.to_string()
        })
        .collect();
    assert!(messages[0].contains("label 5 of row 3 is not one of the model's 5 classes"), "{}", messages[0]);
    assert_eq!(messages[1], messages[0]);
}

#[test]
fn a_model_with_residual_blocks_runs_on_the_gpu() {
    overlap::cuda::check_supported::<residual_net::ResidualNet>().expect("residual blocks run on the GPU");
}
