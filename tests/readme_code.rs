//! The README's Rust code, compiled and run. Each block below is one of the README's, verbatim
//! (`every_rust_block_of_the_readme_is_here_or_an_excerpt` checks, line by line, indentation
//! aside), so what a reader copies from it builds against the library as it is. The README's
//! other blocks are excerpts (an expansion, a signature, an attribute alone), named below.

/// The README's first model ("The model DSL").
mod dsl {
    #[rustfmt::skip]
    mod readme {
use overlap::prelude::*;

#[distributed_model(bucket_cap_mb = 8, first_bucket_mb = 1)] // defaults: 25 and 1, as DDP
pub struct Mlp {
    fc1: Linear<784, 2048>,   // weight [out, in] + bias, PyTorch's init U(-1/sqrt(in), 1/sqrt(in))
    act1: Relu,               // also Gelu (tanh approximation), Tanh, Sigmoid, Dropout
    fc2: Linear<2048, 2048>,
    act2: Relu,
    fc3: Linear<2048, 2048>,
    act3: Relu,
    #[bucket_boundary]        // optional: head never shares a bucket with the layers before it
    head: Linear<2048, 10>,   // (its gradients go on the wire alone, as soon as its backward ends)
}
// `bucket_order = ddp_first_iteration` plans as DDP's first step does with
// `find_unused_parameters=True` (definition order), for comparison (with an explicit
// `bucket_cap_mb`, DDP's first bucket takes that cap too: give `first_bucket_mb` the same).
// `grad_comm = bf16` (or `fp16`; default `fp32`) sends every bucket's gradients at half the
// bytes, summed in FP32: it is in `SCHEDULE`, the bucket table and the fingerprint.
// `grad_comm = powersgd(rank = 4)` (optionally `start_iter = 10`, the steps sent whole first)
// sends each large matrix's gradient as PowerSGD's two thin factors, with error feedback.
// Custom layers implement `overlap::Layer` and describe themselves to the planner:
//     #[layer(input = 256, output = 256, params(gain = [256]))] gain: Gain<256>,
// (see examples/custom_layer.rs; a width-preserving layer leaves out input and output, and one
// without parameters is just `#[layer]`; `ready = definition` when, as `nn.LayerNorm`'s, the first
// parameter's gradient is ready first); the macro checks that (widths, parameter names and shapes, ready order)
// against the type at compile time, and the run checks what the layer does: an `init` that sizes a
// parameter otherwise than `PARAMS` is an error when the model is built, and a forward output or
// input gradient of another shape than `WIDTH` and the input say panics naming the layer.
// Its gradients themselves: `GradientCheck::new().run(layer, &StepContext::rows(4), input)` holds
// `backward` to finite differences of `forward` (and a second `backward` to adding, not
// overwriting), naming the first element that differs, as `torch.autograd.gradcheck` does; a
// `DEVICE_OP` of a built-in's (its kernels run on the GPU instead) needs that built-in's parameters.
// Its products: `overlap::gemm` over `MatRef` views (`.t()` transposes without a copy) runs on the
// BLAS and threads the built-in layers use.
// A renamed dependency (`ml = { package = "overlap", .. }`) is read from Cargo.toml; `crate =
// "path"` (as serde's) names a re-export or an alias (on a module of blocks the path is read inside
// the module: an alias imported beside it is `super::ml`).
// A `macro_rules!` macro may write the model: fields of `$t:ty`, `[$b; $n]` and literals in the
// attributes (`params(weight = [$w])`) read as written out; a struct that a macro call inside a
// module of blocks writes is not seen (the module is read before its calls expand): an error says so.
// `#[init(std = 0.02)]` on the field of a layer or a block draws its weights from N(0, 0.02²), biases at zero
// (GPT-2's init); `ends_with("c_proj.weight", std = 0.0071)` inside it draws the parameters whose
// path ends so at a spread of their own (nanoGPT's residual projections). The innermost `#[init]`
// around a layer decides it; a block's `std` leaves layers of one's own to their `Layer::init` (as
// nanoGPT's `_init_weights` touches only its Linear and Embedding modules), which a suffix or an
// `#[init]` on their own field still draws; a suffix that names no parameter, or an `#[init]` with no parameter
// under it, is a compile error. So is a `#[bucket_boundary]` that separates nothing (on the first
// layer with parameters or before it, or after the last).
    }

    #[test]
    fn the_first_model_is_planned_with_its_boundary() {
        use overlap::DistributedModel;
        let schedule = <readme::Mlp as DistributedModel>::SCHEDULE;
        assert_eq!(schedule.layers.len(), 7);
        // The head (layer 6) alone in the first bucket: without the boundary the 1 MiB cap would
        // have taken fc3's gradients (layer 4) into it too, as `mlp --print-schedule` shows.
        let layers = |b: &overlap::plan::BucketInfo| b.params.iter().map(|p| p.layer).collect::<Vec<_>>();
        assert_eq!(layers(&schedule.buckets[0]), [6, 6], "{schedule:?}");
        assert!(schedule.buckets[1..].iter().all(|b| !layers(b).contains(&6)));
    }
}

/// The README's residual example ("Blocks, residual connections, repeated blocks").
mod blocks {
    #[rustfmt::skip]
    mod readme {
use overlap::prelude::*;

#[distributed_model(bucket_cap_mb = 25, first_bucket_mb = 1)]
pub mod resmlp {
    use overlap::prelude::*;

    #[residual]                   // y = x + fc2(gelu(fc1(norm(x)))); widths checked at compile time
    pub struct ResBlock {
        norm: LayerNorm<256>,
        fc1: Linear<256, 1024>,
        act: Gelu,
        fc2: Linear<1024, 256>,
    }

    pub struct ResMlp {
        input: Linear<784, 256>,
        #[bucket_boundary]        // on a block: no bucket spans two copies
        blocks: [ResBlock; 8],    // eight copies, each with its own parameters
        head: Linear<256, 10>,
    }
}
// overlap_cli::main::<resmlp::ResMlp>()
    }

    #[test]
    fn the_residual_model_unrolls_its_eight_blocks() {
        use overlap::DistributedModel;
        let schedule = <readme::resmlp::ResMlp as DistributedModel>::SCHEDULE;
        let names: Vec<&str> = schedule.layers.iter().map(|l| l.name.as_ref()).collect();
        assert!(names.contains(&"blocks.7.fc2") && !names.contains(&"blocks.8.fc2"), "{names:?}");
    }
}

/// A model of the README's input and output widths, small enough to train 1000 steps in a test.
mod small {
    use overlap::prelude::*;

    #[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
    pub struct Mlp {
        fc1: Linear<784, 16>,
        act1: Relu,
        head: Linear<16, 10>,
    }
}

/// "Training your own model: the `Trainer`", in a scratch folder (it saves checkpoints).
#[rustfmt::skip]
fn trainer() -> Result<overlap::TrainSummary, Box<dyn std::error::Error>> {
    use small::Mlp;
use overlap::prelude::*;

let comm = Communicator::from_env()?;            // MPI under mpirun, one process otherwise
let mut model = Mlp::new(&comm, 0)?;             // same schedule on every rank? then rank 0's init
let mut data = SyntheticClassification::new(7, 784, 10);
let summary = Trainer::new(&comm)
    .optimizer(OptimizerConfig::sgd(0.05).momentum(0.9))
    .steps(1000)
    .batch(64)                                   // per rank; .accumulate(4) for micro-steps
    .save("checkpoints", Some(100))              // .resume("checkpoints") to continue
    .report(ReportFormat::Text, None)            // .trace(..), .timeline(..), .device(..), .threads(..)
    .fit(&mut model, &mut data, &CrossEntropyLoss)?;
    Ok(summary)
}

/// "Your own loop", on the same model and data; then the first batch's loss under the trained
/// model and under the one it started as.
#[rustfmt::skip]
fn own_loop() -> Result<(f32, f32), Box<dyn std::error::Error>> {
    use overlap::prelude::*;
    use overlap::SyntheticClassification;
    use small::{Mlp, MlpWorkspace};
    let mut data = SyntheticClassification::new(7, 784, 10);
let comm = Communicator::from_env()?;
let mut model = Mlp::new(&comm, 0)?;
let mut optimizer = Sgd::new(0.05).momentum(0.9);
let (mut grads, mut ws) = (model.new_grads(), MlpWorkspace::default());  // generated with the model
let (mut batch, mut dlogits) = (overlap::Batch::default(), Matrix::default());
for step in 0..1000u64 {
    let first = step * 64 * comm.world_size() as u64 + 64 * comm.rank() as u64;
    data.fill(first, 64, &mut batch)?;                                 // this rank's shard
    let ctx = StepContext::rows(batch.inputs.rows());
    let logits = model.forward_gathering(&ctx, &batch.inputs, &mut ws, &comm)?;
    let loss = CrossEntropyLoss.loss_and_gradient(logits, &batch, &mut dlogits)?; // bad labels: an error
    let in_flight = model.backward(&mut ws, &dlogits, grads, &comm, &mut optimizer); // grads moved
    grads = model.step(in_flight, &mut optimizer)?; // wait, bucket by bucket; parameters back, updated
    if comm.rank() == 0 && step % 100 == 0 {
        println!("step {step}: loss {loss:.4}");                       // this rank's shard's mean
    }
}
    data.fill(0, 64, &mut batch)?;
    let mut first_batch_loss = |model: &mut Mlp| -> overlap::Result<f32> {
        let logits = model.forward_gathering(&StepContext::rows(64), &batch.inputs, &mut ws, &comm)?;
        CrossEntropyLoss.loss_and_gradient(logits, &batch, &mut dlogits)
    };
    let untrained = first_batch_loss(&mut Mlp::new(&comm, 0)?)?;
    Ok((untrained, first_batch_loss(&mut model)?))
}

#[test]
fn the_trainer_trains_and_saves_as_the_readme_shows() {
    let scratch = tempfile::tempdir().unwrap();
    // The snippet saves into `checkpoints`, beside where it runs; no other test here reads the
    // working folder.
    std::env::set_current_dir(scratch.path()).unwrap();
    let summary = trainer().unwrap();
    assert!(summary.final_loss < 0.5 * summary.first_loss, "{summary:?}");
    assert!(scratch.path().join("checkpoints").is_dir());
}

#[test]
fn the_own_loop_trains_as_the_trainer_does() {
    let (untrained, trained) = own_loop().unwrap();
    assert!(trained < 0.5 * untrained, "the first batch's loss: {untrained} before training, {trained} after");
}

/// The README's Rust blocks that are excerpts, not programs, by their first line.
const EXCERPTS: [&str; 4] = [
    "#[distributed_model(shard_optimizer, bucket_cap_mb = 8, first_bucket_mb = 1)] // examples/mlp_zero.rs",
    "fn forward(&self, ctx: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {",
    "{",
    "#[distributed_model(buckets = auto(link = \"ib-hdr\", world = 64))]     // optional: batch = 64, gflops = 100",
];

/// The README's ```rust blocks, each as its lines.
fn readme_rust_blocks() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut open: Option<Vec<String>> = None;
    for line in readme.lines() {
        match (&mut open, line.trim_start()) {
            (None, "```rust") => open = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(open.take()),
            (Some(block), _) => block.push(line.to_string()),
            (None, _) => {}
        }
    }
    assert!(open.is_none(), "a ```rust block of the README is never closed");
    blocks
}

#[test]
fn every_rust_block_of_the_readme_is_here_or_an_excerpt() {
    let here: Vec<String> = include_str!("readme_code.rs").lines().map(|l| l.trim().to_string()).collect();
    let blocks = readme_rust_blocks();
    assert_eq!(blocks.len(), 4 + EXCERPTS.len(), "the README's ```rust blocks changed: update this test");
    for block in blocks {
        let first = block.first().map(String::as_str).unwrap_or_default();
        if EXCERPTS.contains(&first) {
            continue;
        }
        let lines: Vec<String> = block.iter().map(|l| l.trim().to_string()).collect();
        // The longest run of the block's lines found here, from its first line on.
        let matched = (0..here.len())
            .map(|start| here[start..].iter().zip(&lines).take_while(|(a, b)| a == b).count())
            .max()
            .unwrap_or(0);
        assert!(
            matched == lines.len(),
            "the README's block starting `{first}` is not in tests/readme_code.rs as written (its line `{}` \
             differs): copy it here, where it is compiled and run, or name it in EXCERPTS",
            lines[matched]
        );
    }
}
