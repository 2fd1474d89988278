//! A head tied to the token embedding (nanoGPT's `lm_head.weight = wte.weight`), or two: one
//! parameter, named under both layers, whose gradient sums every contribution.

use super::*;

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
