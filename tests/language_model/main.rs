//! The embeddings of a language model in the DSL: token ids in, a learned row per token
//! (`Embedding`) plus one per position (`PositionEmbedding`, which reads the step context), named
//! as nanoGPT names them (`wte.weight`, `wpe.weight`), with gradients that match finite
//! differences through the whole model, and a next-token task the `Trainer` learns.

#[path = "../common/mod.rs"]
mod common;
mod initialisation;
mod tied_head;

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

/// `M`'s gradients, on 3 sequences, against finite differences of its forward.
fn gradients_match_finite_differences<M: DistributedModel>() {
    let ctx = StepContext::sequences(3, 4);
    let mut model = M::new(&Communicator::single(), 5).unwrap();
    let w = Matrix::from_vec(12, 11, (0..132).map(|i| ((i * 37 % 53) as f32 / 53.0 - 0.5) * 1.5).collect());
    common::finite_differences::check(&mut model, (&ctx, &ids(3, 2), &w), 3, (2e-3, 2e-2));
}

/// `M` trained by the `Trainer` on `NextToken` for 60 steps: its loss at least halves.
fn learns_the_next_token_task<M: DistributedModel>() -> M {
    let comm = Communicator::single();
    let mut model = M::new(&comm, 1).unwrap();
    let summary = Trainer::new(&comm)
        .steps(60)
        .batch(8)
        .optimizer(OptimizerConfig::adamw(0.02))
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut NextToken, &CrossEntropyLoss)
        .unwrap();
    assert!(summary.final_loss < 0.5 * summary.first_loss, "{} -> {}", summary.first_loss, summary.final_loss);
    model
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
    gradients_match_finite_differences::<TinyLm>();
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
    let model = learns_the_next_token_task::<TinyLm>();
    // Generation continues the learned rule (next = token + 1), here drawing the likeliest only.
    let greedy = overlap::sample::SampleConfig { tokens: 6, top_k: Some(1), ..Default::default() };
    let drawn = overlap::sample::generate(&model, &[3], (11, 4), &greedy).unwrap();
    assert_eq!(drawn, [4, 5, 6, 7, 8, 9], "a context longer than 4 keeps its last 4 tokens");
}

#[test]
fn a_model_with_non_finite_outputs_is_not_sampled() {
    let mut model = TinyLm::init(5);
    model.param_mut(overlap::plan::ParamRef { layer: 4, param: 1 })[2] = f32::NAN;
    let config = overlap::sample::SampleConfig { tokens: 3, ..Default::default() };
    let error = overlap::sample::generate(&model, &[3], (11, 4), &config).unwrap_err().to_string();
    assert!(error.starts_with("sampling: the model's output for token 2 is NaN (drawing token 0"), "{error}");
}

/// What the model cannot serve is refused before the first draw, naming the value (each of
/// these used to panic, or to draw as if something else had been asked).
#[test]
fn a_request_the_model_cannot_serve_is_refused_naming_the_value() {
    let model = TinyLm::init(5);
    let refused = |prompt: &[usize], (vocab, context), config: overlap::sample::SampleConfig| {
        let mut drawn = 0;
        let e = overlap::sample::generate_each(&model, prompt, (vocab, context), &config, |_| drawn += 1);
        assert_eq!(drawn, 0, "nothing is drawn before the refusal");
        e.unwrap_err().to_string()
    };
    let fine = overlap::sample::SampleConfig { tokens: 3, ..Default::default() };
    type Case<'a> = (&'a [usize], (usize, usize), overlap::sample::SampleConfig, &'a str);
    let cases: [Case; 8] = [
        (&[], (11, 4), fine, "an empty prompt"),
        (&[3], (11, 0), fine, "a context of 0 tokens"),
        (&[3], (11, 5), fine, "a context of 5 tokens, but TinyLm's position embedding has rows for 4"),
        (&[3], (12, 4), fine, "a vocabulary of 12 tokens, but TinyLm reads and predicts 11"),
        (&[3], (0, 4), fine, "a vocabulary of 0 tokens"),
        (&[3, 9], (8, 4), fine, "prompt token 1 is 9, past the vocabulary of 8 tokens"),
        (&[3], (11, 4), overlap::sample::SampleConfig { temperature: 0.0, ..fine }, "a temperature of 0"),
        (&[3], (11, 4), overlap::sample::SampleConfig { top_k: Some(0), ..fine }, "a top-k of 0 keeps no token"),
    ];
    for (prompt, shape, config, expected) in cases {
        let error = refused(prompt, shape, config);
        assert!(error.contains(expected), "{error}");
    }
    let error = refused(&[3], (11, 4), overlap::sample::SampleConfig { temperature: f32::NAN, ..fine });
    assert!(error.contains("a temperature of NaN"), "{error}");
    // A top-k past the vocabulary keeps every token, as `None` does.
    let every = overlap::sample::SampleConfig { top_k: Some(1000), ..fine };
    let none = overlap::sample::SampleConfig { top_k: None, ..fine };
    let drawn = |config| overlap::sample::generate(&model, &[3], (11, 4), &config).unwrap();
    assert_eq!(drawn(every), drawn(none));
    // A model of features, not token ids (it used to panic in its first layer).
    let features = FeatureNet::init(1);
    let error = overlap::sample::generate(&features, &[3], (11, 4), &fine).unwrap_err().to_string();
    assert!(error.contains("FeatureNet takes 4 features per sample, not a token id"), "{error}");
}

/// Reads 4 features per sample, as a classifier does.
#[distributed_model]
pub struct FeatureNet {
    fc: Linear<4, 11>,
}

/// A dataset's sequences longer than the position table, or its token ids past the vocabulary,
/// are refused before step 1 (not at the batch that first holds one, nor by a layer's
/// assertion), for the training and the held-out data alike.
#[test]
fn data_past_the_models_tables_is_refused_before_step_one() {
    struct Shaped {
        positions: usize,
        tokens: usize,
        filled: bool,
    }
    impl Dataset for Shaped {
        fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
            self.filled = true;
            NextToken.fill(first, rows, batch)
        }
        fn features(&self) -> usize {
            1
        }
        fn positions(&self) -> usize {
            self.positions
        }
        fn token_count(&self) -> Option<usize> {
            Some(self.tokens)
        }
    }
    let comm = Communicator::single();
    let refused = |data: &mut Shaped, held_out: Option<&mut Shaped>| {
        let mut model = TinyLm::new(&comm, 1).unwrap();
        let trainer = Trainer::new(&comm).steps(2).batch(2).report(ReportFormat::Off, None);
        let trainer = match held_out {
            Some(held_out) => trainer.validate(held_out, 1, 1),
            None => trainer,
        };
        trainer.fit(&mut model, data, &CrossEntropyLoss).unwrap_err().to_string()
    };
    let mut long = Shaped { positions: 6, tokens: 11, filled: false };
    let error = refused(&mut long, None);
    assert!(error.contains("sequences of 6 positions, but TinyLm's position embedding has rows for 4"), "{error}");
    assert!(!long.filled, "refused before the first batch is read");
    let mut wide = Shaped { positions: 4, tokens: 12, filled: false };
    let error = refused(&mut wide, None);
    assert!(error.contains("the training data"), "{error}");
    assert!(error.contains("token ids up to 11, past TinyLm's vocabulary of 11 tokens"), "{error}");
    let mut held_out = Shaped { positions: 4, tokens: 40, filled: false };
    let error = refused(&mut Shaped { positions: 4, tokens: 11, filled: false }, Some(&mut held_out));
    assert!(error.contains("the held-out data") && error.contains("token ids up to 39"), "{error}");
}

/// Two position tables: sequences as long as the shorter one's rows.
#[distributed_model]
pub struct TwoTables {
    wte: Embedding<11, 8>,
    wpe: PositionEmbedding<4, 8>,
    fc: Linear<8, 8>,
    wpe2: PositionEmbedding<2, 8>,
    head: Linear<8, 11>,
}

/// The longest sequence a model reads is its shortest position table's: longer data is
/// refused before step 1, not by the second table's assertion.
#[test]
fn a_second_shorter_position_table_bounds_the_sequences() {
    let comm = Communicator::single();
    let mut model = TwoTables::new(&comm, 1).unwrap();
    let trainer = Trainer::new(&comm).steps(2).batch(2).report(ReportFormat::Off, None);
    let error = trainer.fit(&mut model, &mut NextToken, &CrossEntropyLoss).unwrap_err().to_string();
    assert!(error.contains("sequences of 4 positions, but TwoTables's position embedding has rows for 2"), "{error}");
}

/// Notes that could not be read back are not written; a file whose notes cannot be read (another
/// program's) is refused before the model changes.
#[test]
fn unreadable_notes_are_neither_written_nor_half_loaded() {
    use overlap::params_file::{load_into_with_notes, save_params, save_params_with_notes, FileNotes};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zero.safetensors");
    let model = TinyLm::init(1);
    let notes = FileNotes { vocabulary: None, positions: Some(0) };
    let error = save_params_with_notes(&model, &path, &notes).unwrap_err().to_string();
    assert!(error.contains("`positions` is 0, not a sequence length"), "{error}");
    assert!(!path.exists(), "nothing written");
    // The same tensors, with `positions` noted as a word.
    let plain = dir.path().join("plain.safetensors");
    save_params(&model, &plain).unwrap();
    let plain = std::fs::read(plain).unwrap();
    // The plain file's tensors, with one note of another program's writing.
    let noted = |name: &str, key: &str, value: &str| {
        let tensors = safetensors::SafeTensors::deserialize(&plain).unwrap();
        let metadata = std::collections::HashMap::from([(key.to_string(), value.to_string())]);
        let path = dir.path().join(name);
        safetensors::serialize_to_file(tensors.tensors(), Some(metadata), &path).unwrap();
        path
    };
    let worded = noted("worded.safetensors", "positions", "many");
    let mut other = TinyLm::init(2);
    let before: Vec<f32> = other.param(overlap::plan::ParamRef { layer: 0, param: 0 }).to_vec();
    let error = load_into_with_notes(&mut other, &worded).unwrap_err().to_string();
    assert!(error.contains("`positions` is `many`, not a sequence length"), "{error}");
    assert_eq!(other.param(overlap::plan::ParamRef { layer: 0, param: 0 }), &before[..], "the model is as it was");
    // A vocabulary naming a character twice would read two token ids as one character: refused
    // when written and when read, as a vocabulary.txt saying so is.
    let twice = FileNotes { vocabulary: Some("aab".into()), positions: None };
    let error = save_params_with_notes(&model, &path, &twice).unwrap_err().to_string();
    assert!(error.contains("`vocabulary` has 'a' as token 0 and token 1"), "{error}");
    let repeated = noted("repeated.safetensors", "vocabulary", "xyx");
    let error = load_into_with_notes(&mut other, &repeated).unwrap_err().to_string();
    assert!(error.contains("`vocabulary` has 'x' as token 0 and token 2"), "{error}");
    // Sequences longer than the position table has rows: no run of this model wrote that.
    let longer = noted("longer.safetensors", "positions", "5");
    let error = load_into_with_notes(&mut other, &longer).unwrap_err().to_string();
    assert!(error.contains("`positions` is 5, more than the 4 rows of TinyLm's position table"), "{error}");
    assert_eq!(other.param(overlap::plan::ParamRef { layer: 0, param: 0 }), &before[..], "the model is as it was");
}
