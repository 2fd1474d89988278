//! The embeddings of a language model in the DSL: token ids in, a learned row per token
//! (`Embedding`) plus one per position (`PositionEmbedding`, which reads the step context), named
//! as nanoGPT names them (`wte.weight`, `wpe.weight`), with gradients that match finite
//! differences through the whole model, and a next-token task the `Trainer` learns.

mod common;

use overlap::prelude::*;
use overlap::{Batch, ReportFormat};

#[distributed_model(bucket_cap_mb = 0.0005, first_bucket_mb = 0.0005)]
pub struct TinyLm {
    wte: Embedding<11, 8>,
    wpe: PositionEmbedding<4, 8>,
    norm: LayerNorm<8>,
    act: Gelu,
    head: Linear<8, 11>,
}

/// `sequences` sequences of 4 token ids, counting up by a stride per sequence (mod 11).
fn ids(sequences: usize, first: usize) -> Matrix {
    let values = (0..sequences * 4).map(|i| ((first + i / 4) * (1 + i / 4 % 3) + i % 4) % 11).map(|t| t as f32);
    Matrix::from_vec(sequences * 4, 1, values.collect())
}

#[test]
fn embeddings_are_named_and_shaped_as_nanogpts() {
    let s = &TinyLm::SCHEDULE;
    let names: Vec<String> = s.params().map(|p| s.param_name(p)).collect();
    assert_eq!(&names[..2], ["wte.weight", "wpe.weight"]);
    let shapes: Vec<&[usize]> = s.params().take(2).map(|p| &*s.param(p).shape).collect();
    assert_eq!(shapes, [&[11, 8][..], &[4, 8]]);
    // The token table's gradient is ready last: its bucket is launched after backward ends.
    let last = s.buckets.last().unwrap();
    assert_eq!(last.launch_after, 0, "the last bucket launches after `wte`'s backward");
}

#[test]
fn gradients_through_the_embeddings_match_finite_differences() {
    let ctx = StepContext::sequences(3, 4);
    let mut model = TinyLm::new(&Communicator::single(), 5).unwrap();
    let x = ids(3, 2);
    let w = Matrix::from_vec(12, 11, (0..132).map(|i| ((i * 37 % 53) as f32 / 53.0 - 0.5) * 1.5).collect());
    common::finite_differences::check(&mut model, (&ctx, &x, &w), 3, (2e-3, 2e-2));
}

/// Sequences of 4 tokens; the label of each position is the next token of the sequence's pattern.
struct NextToken;

impl Dataset for NextToken {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        batch.inputs = ids(rows, first as usize % 97);
        let next = ids(rows, first as usize % 97);
        batch.labels = (0..rows * 4).map(|r| (next.row(r)[0] as usize + 1) % 11).collect();
        Ok(())
    }

    fn features(&self) -> usize {
        1
    }

    fn positions(&self) -> usize {
        4
    }
}

#[test]
fn the_trainer_learns_a_next_token_task() {
    let comm = Communicator::single();
    let mut model = TinyLm::new(&comm, 1).unwrap();
    let summary = Trainer::new(&comm)
        .steps(60)
        .batch(8)
        .optimizer(OptimizerConfig::adamw(0.02))
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut NextToken, &CrossEntropyLoss)
        .unwrap();
    assert!(summary.final_loss < 0.5 * summary.first_loss, "{} -> {}", summary.first_loss, summary.final_loss);
    // Generation continues the learned rule (next = token + 1), here drawing the likeliest only.
    let greedy = overlap::sample::SampleConfig { tokens: 6, top_k: Some(1), ..Default::default() };
    let drawn = overlap::sample::generate(&model, &[3], (11, 4), &greedy);
    assert_eq!(drawn, [4, 5, 6, 7, 8, 9], "a context longer than 4 keeps its last 4 tokens");
}
