//! Models made of blocks (`#[distributed_model] mod ..`): the blocks unrolled into one schedule
//! named by path, and the gradients of residual, nested and repeated blocks as central finite
//! differences of the loss find them (no assumption about how backward is written).

mod common;

use overlap::plan::ParamRef;
use overlap::prelude::*;

#[distributed_model(bucket_cap_mb = 0.001, first_bucket_mb = 0.001)]
pub mod tiny {
    use overlap::prelude::*;

    /// Residual, and nested in another residual block.
    #[residual]
    pub struct Inner {
        fc: Linear<6, 6>,
        act: Tanh,
    }

    #[residual]
    pub struct Block {
        norm: LayerNorm<6>,
        inner: Inner,
        fc: Linear<6, 6>,
    }

    pub struct Net {
        input: Linear<4, 6>,
        #[bucket_boundary]
        blocks: [Block; 2],
        head: Linear<6, 3>,
    }
}

use tiny::Net;

/// A module's `//!` docs and `#![..]` attributes stay inside it, and a tied head or embedding
/// written with its path is recognised as one.
#[distributed_model]
pub mod documented {
    //! A tied language model of one residual block.
    #![allow(clippy::all)]
    use overlap::prelude::*;

    #[residual]
    pub struct Block {
        fc: Linear<8, 8>,
    }

    pub struct Lm {
        wte: overlap::Embedding<11, 8>,
        block: Block,
        #[tied(wte)]
        head: overlap::TiedHead<8, 11>,
    }
}

#[test]
fn a_documented_module_with_a_tied_head_by_path_plans_the_tie() {
    let schedule = &documented::Lm::SCHEDULE;
    assert_eq!(schedule.layers[2].tied, Some(ParamRef { layer: 0, param: 0 }));
}

fn matrix(rows: usize, cols: usize, seed: usize) -> Matrix {
    let values = (0..rows * cols).map(|i| (((i * 37 + seed * 101) % 53) as f32 / 53.0 - 0.5) * 1.5).collect();
    Matrix::from_vec(rows, cols, values)
}

#[test]
fn blocks_unroll_into_one_schedule_named_by_path() {
    let s = &Net::SCHEDULE;
    let names: Vec<&str> = s.layers.iter().map(|l| l.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "input",
            "blocks.0.norm",
            "blocks.0.inner.fc",
            "blocks.0.inner.act",
            "blocks.0.fc",
            "blocks.1.norm",
            "blocks.1.inner.fc",
            "blocks.1.inner.act",
            "blocks.1.fc",
            "head"
        ]
    );
    assert_eq!(s.param_name(ParamRef { layer: 6, param: 0 }), "blocks.1.inner.fc.weight");
    // Residual blocks, innermost first within a block, as layer ranges.
    assert_eq!(Net::RESIDUALS, &[(2, 3), (1, 4), (6, 7), (5, 8)]);
    // `#[bucket_boundary]` on the repeated field: each block's first layer closes a bucket.
    for block in ["blocks.0.norm", "blocks.1.norm"] {
        let layer = names.iter().position(|n| *n == block).unwrap();
        assert!(s.buckets.iter().any(|b| b.launch_after == layer), "a bucket launches after {block}");
    }
}

#[test]
fn gradients_of_residual_nested_and_repeated_blocks_match_finite_differences() {
    let mut model = Net::new(&Communicator::single(), 5).unwrap();
    let (x, w) = (matrix(5, 4, 1), matrix(5, 3, 2));
    let checked = common::finite_differences::check(&mut model, (&StepContext::rows(5), &x, &w), 1, (2e-3, 2e-2));
    assert_eq!(checked, Net::SCHEDULE.param_count());
}

/// `resmlp args` in `dir`; fails the test unless it succeeds.
fn resmlp(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new(common::example("resmlp")).current_dir(dir).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "resmlp {args:?}:\n{text}");
}

#[test]
fn a_model_of_blocks_checkpoints_by_path_and_resumes_bit_for_bit() {
    let root = common::scratch("blocks-resume");
    let run = ["--batch", "4", "--report", "off", "--log-every", "1000", "--optimizer", "adamw"];
    resmlp(root.path(), &[&run[..], &["--steps", "3", "--save-params", "straight.st"]].concat());
    resmlp(root.path(), &[&run[..], &["--steps", "2", "--save", "ck"]].concat());
    resmlp(root.path(), &[&run[..], &["--steps", "3", "--resume", "ck", "--save-params", "resumed.st"]].concat());
    let (straight, resumed) = (
        common::load_sorted_params(&root.path().join("straight.st")),
        common::load_sorted_params(&root.path().join("resumed.st")),
    );
    assert_eq!(straight, resumed, "a resumed run ends with the very bits of one that did not stop");
    let names: Vec<&str> = straight.iter().map(|(n, _, _)| n.as_str()).collect();
    assert!(names.contains(&"blocks.7.fc2.weight") && names.contains(&"input.bias"), "{names:?}");
    assert_eq!(names.len(), 2 + 8 * 6 + 2, "every parameter, named by its path");
}

/// The same model twice, with and without PowerSGD (whole gradients for its first 2 steps).
macro_rules! blocks_model {
    ($name:ident $(, $($grad_comm:tt)+)?) => {
        #[distributed_model(bucket_cap_mb = 0.01, first_bucket_mb = 0.01 $(, grad_comm = $($grad_comm)+)?)]
        pub mod $name {
            use overlap::prelude::*;

            #[residual]
            pub struct Block {
                norm: LayerNorm<32>,
                fc: Linear<32, 32>,
                act: Gelu,
            }

            pub struct Net {
                input: Linear<8, 32>,
                #[bucket_boundary]
                blocks: [Block; 3],
                head: Linear<32, 4>,
            }
        }
    };
}

blocks_model!(plain);
blocks_model!(compressed, powersgd(rank = 2, start_iter = 2));

/// Every parameter of `$model` (module `$m`) after `steps` AdamW steps on one process.
macro_rules! trained {
    ($m:ident, $steps:expr) => {{
        let comm = Communicator::single();
        let mut model = $m::Net::new(&comm, 3).unwrap();
        let mut data = overlap::SyntheticClassification::new(5, 8, 4);
        Trainer::new(&comm)
            .steps($steps)
            .batch(16)
            .optimizer(OptimizerConfig::adamw(0.01))
            .report(overlap::ReportFormat::Off, None)
            .fit(&mut model, &mut data, &CrossEntropyLoss)
            .unwrap();
        $m::Net::SCHEDULE.params().map(|p| model.param(p).to_vec()).collect::<Vec<Vec<f32>>>()
    }};
}

#[test]
fn powersgd_compresses_a_model_of_blocks_after_its_whole_steps() {
    assert!(compressed::Net::SCHEDULE.buckets.iter().any(|b| b.low_rank.is_some()));
    assert_eq!(trained!(compressed, 2), trained!(plain, 2), "the first two steps send whole gradients");
    let (compressed, plain) = (trained!(compressed, 6), trained!(plain, 6));
    assert_ne!(compressed, plain, "then the factors travel, an approximation");
    assert!(compressed.iter().flatten().all(|v| v.is_finite()));
}
