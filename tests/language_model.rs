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

/// The head tied to the token embedding, as nanoGPT's `lm_head.weight = wte.weight`.
#[distributed_model(bucket_cap_mb = 0.0002, first_bucket_mb = 0.0002)]
pub struct TiedLm {
    wte: Embedding<11, 8>,
    wpe: PositionEmbedding<4, 8>,
    norm: LayerNorm<8>,
    act: Gelu,
    #[tied(wte)]
    head: TiedHead<8, 11>,
}

/// Two heads tied to one embedding: one weight, three contributions to its gradient.
#[distributed_model(bucket_cap_mb = 0.0002, first_bucket_mb = 0.0002)]
pub struct TwoHeadLm {
    wte: Embedding<11, 8>,
    wpe: PositionEmbedding<4, 8>,
    #[tied(wte)]
    head1: TiedHead<8, 11>,
    proj: Linear<11, 8>,
    #[tied(wte)]
    head2: TiedHead<8, 11>,
}

#[test]
fn gradients_through_two_heads_tied_to_one_embedding_match_finite_differences() {
    gradients_match_finite_differences::<TwoHeadLm>();
}

#[test]
fn a_tied_head_has_no_parameter_of_its_own_and_the_schedule_says_whose_it_reads() {
    let s = &TiedLm::SCHEDULE;
    let names: Vec<String> = s.params().map(|p| s.param_name(p)).collect();
    assert_eq!(names, ["wte.weight", "wpe.weight", "norm.weight", "norm.bias"], "one parameter for both");
    assert_eq!(s.layers[4].tied, Some(overlap::plan::ParamRef { layer: 0, param: 0 }));
    let wte = s.param(overlap::plan::ParamRef { layer: 0, param: 0 });
    let text = s.to_string();
    let launched = &s.layers[s.buckets[wte.bucket].launch_after].name;
    assert_eq!(launched, "wte", "the tied weight's bucket waits for the embedding's contribution");
    assert!(
        text.contains(&format!(
            "tied: head reads wte.weight as its weight; its gradient adds to that parameter's in b{}",
            wte.bucket
        )),
        "{text}"
    );
    assert_ne!(s.fingerprint(), TinyLm::SCHEDULE.fingerprint());
}

/// A tied weight comes from PyTorch under either name: `safetensors.torch.save_model` keeps the
/// head's (`head.weight`) and drops the owner's; a cloned `state_dict` holds both, equal. Two
/// that differ are refused, as are files without either.
#[test]
fn a_tied_weight_loads_under_the_head_s_name_too() {
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("ours.safetensors");
    let model = TiedLm::init(3);
    overlap::params_file::save_params(&model, &ours).unwrap();
    let tensors = common::load_sorted_params(&ours);
    let write = |name: &str, rename: &dyn Fn(&str) -> Vec<String>, change: bool| {
        let mut data = Vec::new();
        for (tensor, shape, values) in &tensors {
            for renamed in rename(tensor) {
                let mut values = values.clone();
                if change && renamed == "head.weight" {
                    values[0] += 1.0;
                }
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                data.push((renamed, shape.clone(), bytes));
            }
        }
        let views: Vec<(String, safetensors::tensor::TensorView)> = data
            .iter()
            .map(|(n, shape, bytes)| {
                (
                    n.clone(),
                    safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes).unwrap(),
                )
            })
            .collect();
        let path = dir.path().join(name);
        safetensors::serialize_to_file(views, None, &path).unwrap();
        path
    };
    let head_only = |n: &str| vec![if n == "wte.weight" { "head.weight".into() } else { n.to_string() }];
    let both =
        |n: &str| if n == "wte.weight" { vec![n.to_string(), "head.weight".into()] } else { vec![n.to_string()] };
    for path in [write("head_only.st", &head_only, false), write("both.st", &both, false)] {
        let mut loaded = TiedLm::init(4);
        overlap::params_file::load_into(&mut loaded, &path).unwrap();
        let s = &TiedLm::SCHEDULE;
        assert!(s.params().all(|p| loaded.param(p) == model.param(p)), "{} loads as ours", path.display());
    }
    let differ = write("differ.st", &both, true);
    let e = overlap::params_file::load_into(&mut TiedLm::init(4), &differ).unwrap_err().to_string();
    assert!(e.contains("`head.weight` and `wte.weight` hold other values"), "{e}");
    let neither = write("neither.st", &|n: &str| if n == "wte.weight" { vec![] } else { vec![n.to_string()] }, false);
    let e = overlap::params_file::load_into(&mut TiedLm::init(4), &neither).unwrap_err().to_string();
    assert!(e.contains("missing tensor `wte.weight`"), "{e}");
}

/// A parameters file holding a non-finite value is refused, naming the tensor and the place,
/// rather than loaded into a model whose first loss would then be NaN.
#[test]
fn a_parameters_file_holding_a_non_finite_value_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nan.safetensors");
    overlap::params_file::save_params(&TiedLm::init(3), &path).unwrap();
    let mut params = common::load_sorted_params(&path);
    let (name, _, values) = params.iter_mut().find(|(name, ..)| name == "wte.weight").unwrap();
    values[5] = f32::NAN;
    let name = name.clone();
    common::write_params(&path, &params);
    let e = overlap::params_file::load_into(&mut TiedLm::init(4), &path).unwrap_err().to_string();
    assert!(e.contains(&format!("`{name}` holds NaN at index 5: a parameter must be finite")), "{e}");
}

/// Both contributions to the tied weight's gradient, the head's (every row of the table, early
/// in backward) and the embedding's (the rows used, last), against finite differences.
#[test]
fn gradients_through_a_tied_head_match_finite_differences() {
    gradients_match_finite_differences::<TiedLm>();
}

#[test]
fn the_trainer_learns_with_a_tied_head() {
    learns_the_next_token_task::<TiedLm>();
}

/// The tied weight's gradient summed over two micro-steps is twice one's (the embedding adds to
/// what the head wrote, the head to what the last micro-step left), and a synchronised step
/// updates the weight by both contributions: SGD's `w - lr·g` with `g` from the micro-step.
#[test]
fn a_tied_weight_accumulates_and_updates_with_both_contributions() {
    use overlap::GradientBuckets;
    let comm = Communicator::single();
    let ctx = StepContext::sequences(3, 4);
    let (x, w) = (ids(3, 2), Matrix::from_vec(12, 11, (0..132).map(|i| (i % 7) as f32 / 7.0 - 0.4).collect()));
    let mut model = TiedLm::new(&comm, 5).unwrap();
    let wte = overlap::plan::ParamRef { layer: 0, param: 0 };
    let schedule = TiedLm::SCHEDULE;
    let info = schedule.param(wte);
    let gradient = |model: &TiedLm, passes: usize| {
        let (mut ws, mut grads) = (TiedLmWorkspace::default(), model.new_grads());
        for _ in 0..passes {
            model.forward_with(&ctx, &x, &mut ws);
            model.backward_no_sync(&mut ws, &w, &mut grads);
        }
        grads.buckets()[info.bucket].view(info.offset, info.numel()).to_vec()
    };
    let (once, twice) = (gradient(&model, 1), gradient(&model, 2));
    for (k, (a, b)) in once.iter().zip(&twice).enumerate() {
        assert!((2.0 * a - b).abs() <= 1e-6 * (1.0 + a.abs()), "wte.weight[{k}]: once {a}, twice {b}");
    }
    let before = model.param(wte).to_vec();
    let mut sgd = overlap::Sgd::new(0.1);
    let (mut ws, grads) = (TiedLmWorkspace::default(), model.new_grads());
    model.forward_with(&ctx, &x, &mut ws);
    let in_flight = model.backward(&mut ws, &w, grads, &comm, &mut sgd);
    model.step(in_flight, &mut sgd).unwrap();
    for (k, ((after, b), g)) in model.param(wte).iter().zip(&before).zip(&once).enumerate() {
        assert!((after - (b - 0.1 * g)).abs() <= 1e-6, "wte.weight[{k}]: {b} - 0.1 * {g} is not {after}");
    }
}

/// A layer of one's own for the `#[init]` test: `y = x * weight + bias` per feature, its weight
/// a `[1, D]` matrix starting at ones and its bias at one half, so that its own `init` shows.
pub struct Affine<const D: usize> {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl<const D: usize> Layer for Affine<D> {
    const PARAMS: &'static [overlap::ParamDef] =
        &[overlap::ParamDef { name: "weight", shape: &[1, D] }, overlap::ParamDef { name: "bias", shape: &[D] }];
    const WIDTH: overlap::Width = overlap::Width::Preserving;
    type Saved = ();

    fn init(_: &mut overlap::InitRng) -> Self {
        Affine { weight: vec![1.0; D], bias: vec![0.5; D] }
    }

    fn param(&self, index: usize) -> &[f32] {
        [&self.weight, &self.bias][index]
    }

    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        match index {
            0 => &mut self.weight,
            _ => &mut self.bias,
        }
    }

    fn forward(&self, _: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        output.resize(input.rows(), D);
        for r in 0..input.rows() {
            for (((y, x), w), b) in output.row_mut(r).iter_mut().zip(input.row(r)).zip(&self.weight).zip(&self.bias) {
                *y = x * w + b;
            }
        }
    }

    fn backward(
        &self,
        _: &StepContext,
        input: &Matrix,
        _: &Matrix,
        _: &(),
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        _accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        for r in 0..input.rows() {
            for (c, (x, dy)) in input.row(r).iter().zip(grad_output.row(r)).enumerate() {
                grads[0][c] += x * dy;
                grads[1][c] += dy;
            }
        }
        if let Some(dx) = grad_input {
            dx.resize(input.rows(), D);
            for r in 0..input.rows() {
                for ((d, dy), w) in dx.row_mut(r).iter_mut().zip(grad_output.row(r)).zip(&self.weight) {
                    *d = dy * w;
                }
            }
        }
    }
}

/// `#[init(..)]` on a layer or a block of layers: nanoGPT's initialisation, its residual
/// projections at a spread of their own, an inner `#[init]` deciding its layer whole, and layers
/// of one's own left to their `init` by a block's `std` unless a suffix or their own field's
/// `#[init]` names them.
#[distributed_model(bucket_cap_mb = 1)]
pub mod initialised {
    use overlap::prelude::*;

    #[residual]
    pub struct Res {
        norm: LayerNorm<8>,
        fc: Linear<8, 8>,
        #[init(std = 0.5)]
        out: Linear<8, 8>,
        #[layer(params(weight = [1, 8], bias = [8]))]
        kept: super::Affine<8>,
        #[layer(params(weight = [1, 8], bias = [8]))]
        named: super::Affine<8>,
        #[init(std = 0.3)]
        #[layer(params(weight = [1, 8], bias = [8]))]
        drawn: super::Affine<8>,
    }

    pub struct Net {
        #[init(std = 0.02)]
        wte: Embedding<11, 8>,
        #[init(std = 0.02, ends_with("fc.weight", std = 0.002), ends_with("named.weight", std = 5.0))]
        blocks: [Res; 2],
        #[init(ends_with("head.bias", std = 1.0))]
        head: Linear<8, 11>,
    }
}

#[test]
fn init_redraws_the_weights_of_a_layer_and_of_every_layer_of_a_block_and_the_parameters_a_suffix_names() {
    let model = initialised::Net::new(&Communicator::single(), 2).unwrap();
    let s = &initialised::Net::SCHEDULE;
    let param = |name: &str| model.param(s.params().find(|&p| s.param_name(p) == name).unwrap()).to_vec();
    let spread = |v: &[f32]| (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt();
    let about = |name: &str, low: f32, high: f32| {
        let std = spread(&param(name));
        assert!((low..high).contains(&std), "{name}: spread {std}, not in {low}..{high}");
    };
    about("wte.weight", 0.01, 0.03);
    for block in ["blocks.0", "blocks.1"] {
        about(&format!("{block}.fc.weight"), 0.001, 0.003);
        about(&format!("{block}.out.weight"), 0.3, 0.7);
        assert!(param(&format!("{block}.fc.bias")).iter().all(|&b| b == 0.0), "biases zeroed");
        assert!(param(&format!("{block}.out.bias")).iter().all(|&b| b == 0.0), "biases zeroed");
        assert!(param(&format!("{block}.norm.weight")).iter().all(|&g| g == 1.0), "LayerNorm's gains kept");
        // A layer of one's own: the block's `std` keeps its `init`; a suffix draws what it names,
        // and an `#[init]` on its own field decides it as it decides a built-in layer.
        assert!(param(&format!("{block}.kept.weight")).iter().all(|&w| w == 1.0), "own init kept");
        assert!(param(&format!("{block}.kept.bias")).iter().all(|&b| b == 0.5), "own init kept");
        about(&format!("{block}.named.weight"), 2.5, 8.0);
        assert!(param(&format!("{block}.named.bias")).iter().all(|&b| b == 0.5), "not named: own init kept");
        about(&format!("{block}.drawn.weight"), 0.15, 0.45);
        assert!(param(&format!("{block}.drawn.bias")).iter().all(|&b| b == 0.0), "its own `std` zeroes its bias");
    }
    // `head.weight` keeps PyTorch's default, U(-1/√8, 1/√8): a spread of about 0.2.
    about("head.weight", 0.1, 0.3);
    // Out of reach of the default, whose spread is at most 1/√8 ≈ 0.354.
    about("head.bias", 0.6, 1.6);
    let again = initialised::Net::new(&Communicator::single(), 2).unwrap();
    assert_eq!(again.param(overlap::plan::ParamRef { layer: 0, param: 0 }), &param("wte.weight")[..], "deterministic");
}

/// A dataset whose batch holds a token id past the embedding's table: the run stops with an
/// error naming it, before the layer reads it.
#[test]
fn a_token_id_past_the_vocabulary_is_an_error_naming_it() {
    struct PastTheTable;
    impl Dataset for PastTheTable {
        fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
            batch.inputs = ids(rows, first as usize);
            batch.inputs.as_mut_slice()[5] = 11.0;
            batch.labels = vec![0; rows * 4];
            Ok(())
        }
        fn features(&self) -> usize {
            1
        }
        fn positions(&self) -> usize {
            4
        }
    }
    let comm = Communicator::single();
    let mut model = TiedLm::new(&comm, 1).unwrap();
    let e = Trainer::new(&comm)
        .steps(2)
        .batch(2)
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut PastTheTable, &CrossEntropyLoss)
        .unwrap_err();
    assert!(e.to_string().contains("row 5 of the batch holds 11, not a token id below the embedding's 11"), "{e}");
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
