//! A regression model trained with the `Trainer`: `external-user OUT_DIR` writes checkpoints
//! into OUT_DIR/ck and the final parameters into OUT_DIR/params.safetensors. The global batch
//! is 16 samples whatever the number of ranks. It depends on `overlap` under another name
//! (`ml`), so the model says where the generated code finds it: `crate = "::ml"`.
use ml::prelude::*;
use ml::{Batch, ReportFormat};

#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1, crate = "::ml")]
pub struct Regressor {
    fc1: Linear<8, 32>,
    norm: LayerNorm<32>,
    act1: Gelu,
    fc2: Linear<32, 32>,
    act2: Tanh,
    head: Linear<32, 2>,
}

/// Huber loss (delta 1), averaged over every element.
struct Huber;

impl Loss for Huber {
    fn loss_and_gradient(&self, out: &Matrix, batch: &Batch, grad: &mut Matrix) -> ml::Result<f32> {
        grad.resize(out.rows(), out.cols());
        let n = out.as_slice().len() as f32;
        let mut total = 0.0;
        for ((g, &o), &t) in grad.as_mut_slice().iter_mut().zip(out.as_slice()).zip(batch.targets.as_slice()) {
            let d = o - t;
            total += if d.abs() <= 1.0 { 0.5 * d * d } else { d.abs() - 0.5 };
            *g = d.clamp(-1.0, 1.0) / n;
        }
        Ok(total / n)
    }
}

/// Sample i: x_j = sin(i + j), y = (sum of x, product of the first two).
struct Waves;

impl Dataset for Waves {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> ml::Result<()> {
        batch.inputs.resize(rows, 8);
        batch.targets.resize(rows, 2);
        for r in 0..rows {
            let x = batch.inputs.row_mut(r);
            x.iter_mut().enumerate().for_each(|(j, v)| *v = ((first + r as u64) as f32 * 0.37 + j as f32).sin());
            let (sum, product) = (x.iter().sum::<f32>(), x[0] * x[1]);
            batch.targets.row_mut(r).copy_from_slice(&[sum, product]);
        }
        Ok(())
    }
    fn features(&self) -> usize {
        8
    }
}

fn main() -> ml::Result<()> {
    let out = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: external-user OUT_DIR"));
    let comm = Communicator::from_env()?;
    let mut model = Regressor::new(&comm, 3)?;
    let summary = Trainer::new(&comm)
        .optimizer(OptimizerConfig::adamw(0.01))
        .steps(30)
        .batch(16 / comm.world_size())
        .save(out.join("ck"), Some(10))
        .report(ReportFormat::Text, None)
        .fit(&mut model, &mut Waves, &Huber)?;
    if comm.rank() == 0 {
        ml::params_file::save_params(&model, &out.join("params.safetensors"))?;
        assert!(summary.final_loss < summary.first_loss, "the loss falls");
    }
    Ok(())
}
