//! Layers that mix positions within a sequence: the step context reaches every layer, in forward
//! and backward, from `forward_with` and from the `Trainer` (`Dataset::positions`), while the
//! per-token layers keep working on rows. The layer here is a causal mean, written by a user as
//! attention will be: it mixes the positions of one sequence, never two sequences.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use overlap::plan::ParamRef;
use overlap::prelude::*;
use overlap::{Batch, InitRng, ParamDef, Width};

/// The positions per sequence the last `CausalMean::forward` saw.
static POSITIONS_SEEN: AtomicUsize = AtomicUsize::new(0);

/// `y[s, t] = mean(x[s, 0..=t])`, per feature.
pub struct CausalMean<const D: usize>;

impl<const D: usize> Layer for CausalMean<D> {
    const PARAMS: &'static [ParamDef] = &[];
    const WIDTH: Width = Width::Preserving;
    type Saved = ();

    fn init(_: &mut InitRng) -> Self {
        CausalMean
    }

    fn forward(&self, ctx: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        assert_eq!(input.rows(), ctx.row_count());
        POSITIONS_SEEN.store(ctx.positions(), Ordering::Relaxed);
        output.resize(input.rows(), D);
        for s in 0..ctx.sequence_count() {
            let mut sum = [0.0f32; D];
            for (t, row) in ctx.sequence_rows(s).enumerate() {
                for (acc, x) in sum.iter_mut().zip(input.row(row)) {
                    *acc += x;
                }
                for (y, acc) in output.row_mut(row).iter_mut().zip(&sum) {
                    *y = acc / (t + 1) as f32;
                }
            }
        }
    }

    fn backward(
        &self,
        ctx: &StepContext,
        input: &Matrix,
        _output: &Matrix,
        _: &(),
        grad_output: &Matrix,
        _grads: &mut [&mut [f32]],
        _accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        let Some(dx) = grad_input else { return };
        dx.resize(input.rows(), D);
        // dx[s, u] = Σ_{t ≥ u} dy[s, t] / (t + 1): a suffix sum, last position first.
        for s in 0..ctx.sequence_count() {
            let mut suffix = [0.0f32; D];
            for (t, row) in ctx.sequence_rows(s).enumerate().rev() {
                for (acc, dy) in suffix.iter_mut().zip(grad_output.row(row)) {
                    *acc += dy / (t + 1) as f32;
                }
                dx.row_mut(row).copy_from_slice(&suffix);
            }
        }
    }
}

#[distributed_model(bucket_cap_mb = 0.0001, first_bucket_mb = 0.0001)]
pub struct SeqNet {
    embed: Linear<3, 4>,
    #[layer] // the bare form of `#[layer()]`: width-preserving, no parameters
    mix: CausalMean<4>,
    act: Tanh,
    head: Linear<4, 2>,
}

fn matrix(rows: usize, cols: usize, seed: usize) -> Matrix {
    let values = (0..rows * cols).map(|i| (((i * 37 + seed * 101) % 53) as f32 / 53.0 - 0.5) * 1.5).collect();
    Matrix::from_vec(rows, cols, values)
}

fn output(model: &SeqNet, ctx: &StepContext, x: &Matrix) -> Matrix {
    model.forward_with(ctx, x, &mut SeqNetWorkspace::default()).clone()
}

#[test]
fn gradients_through_a_position_mixing_layer_match_finite_differences() {
    let ctx = StepContext::sequences(3, 4);
    let mut model = SeqNet::new(&Communicator::single(), 2).unwrap();
    let (x, w) = (matrix(12, 3, 1), matrix(12, 2, 2));
    common::finite_differences::check(&mut model, (&ctx, &x, &w), 1, (2e-3, 2e-2));
    let (mut ws, mut grads) = (SeqNetWorkspace::default(), model.new_grads());
    model.forward_with(&ctx, &x, &mut ws);
    model.backward_no_sync(&mut ws, &w, &mut grads);
    // Grouped as rows instead, the same input gives other gradients: the context reached backward.
    let (mut rows_ws, mut rows_grads) = (SeqNetWorkspace::default(), model.new_grads());
    model.forward(&x, &mut rows_ws);
    model.backward_no_sync(&mut rows_ws, &w, &mut rows_grads);
    let schedule = SeqNet::SCHEDULE;
    let embed = schedule.param(ParamRef { layer: 0, param: 0 });
    let view = |g: &SeqNetGrads| overlap::GradientBuckets::buckets(g)[embed.bucket].view(embed.offset, 12).to_vec();
    assert_ne!(view(&grads), view(&rows_grads));
}

#[test]
fn a_position_sees_its_own_sequence_up_to_itself_and_nothing_else() {
    let ctx = StepContext::sequences(3, 4);
    let model = SeqNet::new(&Communicator::single(), 2).unwrap();
    let x = matrix(12, 3, 1);
    let before = output(&model, &ctx, &x);
    // Position 2 of sequence 1 (row 6) changes: rows 6 and 7 may, no other.
    let mut changed = x.clone();
    changed.row_mut(6).iter_mut().for_each(|v| *v += 1.0);
    let after = output(&model, &ctx, &changed);
    for row in 0..12 {
        let same = before.row(row) == after.row(row);
        assert_eq!(same, !(6..8).contains(&row), "row {row}");
    }
}

/// Sequences of 4 positions, 3 features per position; the label of a position is whether the
/// running mean of its sequence's first feature is positive.
struct Sequences;

impl Dataset for Sequences {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        batch.inputs.resize(rows * 4, 3);
        batch.labels.clear();
        for s in 0..rows {
            let mut sum = 0.0;
            for t in 0..4 {
                let row = s * 4 + t;
                let seed = (first as usize + s) * 4 + t;
                let values: Vec<f32> = (0..3).map(|f| (((seed * 7 + f * 13) % 11) as f32 - 5.0) / 5.0).collect();
                sum += values[0];
                batch.inputs.row_mut(row).copy_from_slice(&values);
                batch.labels.push(usize::from(sum > 0.0));
            }
        }
        Ok(())
    }

    fn features(&self) -> usize {
        3
    }

    fn positions(&self) -> usize {
        4
    }
}

#[test]
fn the_trainer_groups_a_datasets_rows_into_its_sequences() {
    let comm = Communicator::single();
    let mut model = SeqNet::new(&comm, 1).unwrap();
    let summary = Trainer::new(&comm)
        .steps(30)
        .batch(8)
        .optimizer(OptimizerConfig::adamw(0.05))
        .report(overlap::ReportFormat::Off, None)
        .fit(&mut model, &mut Sequences, &CrossEntropyLoss)
        .unwrap();
    assert_eq!(POSITIONS_SEEN.load(Ordering::Relaxed), 4);
    let (first, last) = (summary.first_loss, summary.final_loss);
    assert!(last < first, "the loss falls over 30 steps: {first} -> {last}");
}

/// A dataset that fills one row per sample while saying each sample has 4 positions.
struct Short;

impl Dataset for Short {
    fn fill(&mut self, _first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        batch.inputs.resize(rows, 3);
        batch.labels = vec![0; rows];
        Ok(())
    }

    fn features(&self) -> usize {
        3
    }

    fn positions(&self) -> usize {
        4
    }
}

#[test]
fn a_dataset_that_fills_fewer_rows_than_its_positions_say_is_refused() {
    let comm = Communicator::single();
    let mut model = SeqNet::new(&comm, 1).unwrap();
    let err = Trainer::new(&comm)
        .steps(1)
        .batch(2)
        .report(overlap::ReportFormat::Off, None)
        .fit(&mut model, &mut Short, &CrossEntropyLoss)
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("asked the dataset for 2 samples of 4 position(s)") && text.contains("filled 2 rows"),
        "{text}"
    );
}
