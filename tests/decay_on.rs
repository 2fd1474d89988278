//! Weight decay on matrices only (`OptimizerConfig::decay_on`, nanoGPT's parameter groups): a
//! bias or a LayerNorm gain moves as with no decay at all, a weight as with decay, on the host
//! and in the updates lent to the all-reduces.

use overlap::prelude::*;
use overlap::{DecayOn, ReportFormat, SyntheticClassification};

#[distributed_model(bucket_cap_mb = 0.0005, first_bucket_mb = 0.0005)]
pub struct Net {
    fc1: Linear<6, 16>,
    norm: LayerNorm<16>,
    act: Gelu,
    head: Linear<16, 3>,
}

/// Every parameter by name after one step of `optimizer`.
fn one_step(optimizer: OptimizerConfig) -> Vec<(String, Vec<f32>)> {
    let comm = Communicator::single();
    let mut model = Net::new(&comm, 2).unwrap();
    Trainer::new(&comm)
        .steps(1)
        .batch(8)
        .optimizer(optimizer)
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut SyntheticClassification::new(3, 6, 3), &CrossEntropyLoss)
        .unwrap();
    Net::SCHEDULE.params().map(|p| (Net::SCHEDULE.param_name(p), model.param(p).to_vec())).collect()
}

#[test]
fn only_matrices_decay() {
    for base in [OptimizerConfig::adamw(0.01).weight_decay(0.5), OptimizerConfig::sgd(0.1).weight_decay(0.5)] {
        let (decayed, none) = (one_step(base), one_step(base.weight_decay(0.0)));
        let grouped = one_step(base.decay_on(DecayOn::Matrices));
        for (((name, got), (_, all)), (_, plain)) in grouped.iter().zip(&decayed).zip(&none) {
            let matrix = name.ends_with("weight") && !name.starts_with("norm");
            let want = if matrix { all } else { plain };
            assert_eq!(got, want, "{name}: {:?}", base.kind);
            // The decay moves every parameter but LayerNorm's bias (zeros before the step), so the
            // comparison tells the two apart.
            if name != "norm.bias" {
                assert_ne!(all, plain, "{name}: decay and no decay give the same");
            }
        }
    }
}
