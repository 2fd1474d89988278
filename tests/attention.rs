//! Causal self-attention in the DSL: nanoGPT's block shape (pre-norm residual attention, then a
//! pre-norm residual MLP) repeated, named as nanoGPT names it (`h.1.attn.c_attn.weight`),
//! planned with the attention's parameters in PyTorch's ready order, with gradients that match
//! finite differences through the whole model, and a next-token task it learns.

mod common;

use overlap::prelude::*;
use overlap::{Batch, ReportFormat};

/// The model, in module `$name` planned with `$settings`: written once for the two bucket orders.
macro_rules! tiny_gpt {
    ($name:ident, $($settings:tt)*) => {
        #[distributed_model($($settings)*)]
        pub mod $name {
            use overlap::prelude::*;

            #[residual]
            pub struct Attend {
                ln_1: LayerNorm<16>,
                attn: CausalSelfAttention<16, 4>,
            }

            #[residual]
            pub struct Think {
                ln_2: LayerNorm<16>,
                c_fc: Linear<16, 64>,
                gelu: Gelu,
                c_proj: Linear<64, 16>,
            }

            pub struct Block {
                a: Attend,
                m: Think,
            }

            pub struct TinyGpt {
                wte: Embedding<13, 16>,
                wpe: PositionEmbedding<6, 16>,
                h: [Block; 2],
                ln_f: LayerNorm<16>,
                lm_head: Linear<16, 13>,
            }
        }
    };
}

tiny_gpt!(tiny_gpt, bucket_cap_mb = 0.002, first_bucket_mb = 0.002);
// The same model planned in DDP's first-iteration order (definition order, launched in reverse).
tiny_gpt!(tiny_gpt_first_iteration, bucket_cap_mb = 0.002, first_bucket_mb = 0.002, bucket_order = ddp_first_iteration);

use tiny_gpt::TinyGpt;

fn ids(sequences: usize, positions: usize, first: usize) -> Matrix {
    let values = (0..sequences * positions).map(|i| ((first + i / positions) * 3 + (i % positions) * 2) % 13);
    Matrix::from_vec(sequences * positions, 1, values.map(|t| t as f32).collect())
}

/// Named as nanoGPT names it, and planned as PyTorch runs it: a twin of the same modules
/// (`tiny_gpt` in `fixtures/ddp_buckets.json`) made its gradients ready in our buffer order, and
/// DDP bucketed them as we do, in its first step and after rebuilding.
#[test]
fn attention_is_named_and_planned_as_in_pytorch() {
    let s = &TinyGpt::SCHEDULE;
    let names: Vec<String> = s.params().map(|p| s.param_name(p)).collect();
    for name in ["h.1.a.attn.c_attn.weight", "h.1.a.attn.c_proj.bias", "h.0.m.c_fc.weight", "lm_head.bias"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    let observed = common::pytorch_plans::observed("tiny_gpt");
    let mut twin_names = observed.ready_order.clone();
    twin_names.sort();
    let mut ours = names.clone();
    ours.sort();
    assert_eq!(ours, twin_names, "the twin's state-dict names");
    observed.check(s, false);
    observed.check(&tiny_gpt_first_iteration::TinyGpt::SCHEDULE, true);
}

#[test]
fn gradients_through_attention_blocks_match_finite_differences() {
    let ctx = StepContext::sequences(2, 5);
    let mut model = TinyGpt::new(&Communicator::single(), 3).unwrap();
    let x = ids(2, 5, 1);
    let w = Matrix::from_vec(10, 13, (0..130).map(|i| ((i * 37 % 53) as f32 / 53.0 - 0.5) * 1.5).collect());
    let checked = common::finite_differences::check(&mut model, (&ctx, &x, &w), 7, (3e-3, 3e-2));
    assert!(checked > 500, "{checked} gradients checked");
}

/// Sequences of 6 tokens; each position's label is the token two places before it (so only
/// attention to earlier positions can predict it), or a fixed token for the first two.
struct CopyBack;

impl Dataset for CopyBack {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        let mut state = first.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 13) as usize
        };
        let tokens: Vec<usize> = (0..rows * 6).map(|_| next()).collect();
        batch.inputs = Matrix::from_vec(rows * 6, 1, tokens.iter().map(|&t| t as f32).collect());
        batch.labels = (0..rows * 6).map(|r| if r % 6 >= 2 { tokens[r - 2] } else { 0 }).collect();
        Ok(())
    }

    fn features(&self) -> usize {
        1
    }

    fn positions(&self) -> usize {
        6
    }
}

#[test]
fn attention_learns_to_copy_an_earlier_token() {
    let comm = Communicator::single();
    let mut model = TinyGpt::new(&comm, 1).unwrap();
    let summary = Trainer::new(&comm)
        .steps(150)
        .batch(16)
        .optimizer(OptimizerConfig::adamw(0.01))
        .report(ReportFormat::Off, None)
        .log_every(50)
        .fit(&mut model, &mut CopyBack, &CrossEntropyLoss)
        .unwrap();
    // Chance is ln(13) ≈ 2.56 on the copied positions; copying drives it towards 0.
    assert!(summary.final_loss < 0.5 * summary.first_loss, "{} -> {}", summary.first_loss, summary.final_loss);
}
