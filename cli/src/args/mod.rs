//! Command-line flags shared by every training binary (`clap`): bad values are refused with a
//! message before anything starts. `TrainArgs::train_config` turns them into the runtime's plain
//! settings.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::builder::TypedValueParser;
use clap::parser::ValueSource;
use clap::{ArgMatches, FromArgMatches, Id, Parser};
use overlap_runtime::optim::LrSchedule;
use overlap_runtime::plan::Link;
use overlap_runtime::profile::Cluster;
use overlap_runtime::WireFormat;

mod choices;
mod flag_as_value;
mod per_program;
mod settings;
#[cfg(test)]
mod tests;
mod values;

pub use choices::{DecayOnArg, Device, OptimizerKind, PrintSchedule, ReportFormat, Transport};
pub(crate) use per_program::{about, for_model};
use values::{
    beta, count, dropout_rate, non_negative_f64, parse_clip, parse_cluster, parse_link, parse_lr_schedule,
    parse_timeout, positive, positive_f64, svg_file, temperature, thread_count,
};
pub use values::{ClipNorm, Timeout};

/// `argv` (the program's name first) parsed by `command`, shown under the program's own name, a
/// flag where a value belongs refused as a bad value.
pub(crate) fn matches(
    command: clap::Command,
    argv: impl IntoIterator<Item = std::ffi::OsString>,
) -> Result<ArgMatches, clap::Error> {
    let argv: Vec<std::ffi::OsString> = argv.into_iter().collect();
    let mut command = per_program::named(command);
    flag_as_value::refuse_flag_as_value(&mut command, argv.get(1..).unwrap_or_default())?;
    command.try_get_matches_from(argv)
}

/// Train a `#[distributed_model]` on a deterministic synthetic classification set. Run it with
/// `mpirun -n N` for N data-parallel ranks; the global batch is batch x N x accumulate.
#[derive(Clone, Debug, Parser)]
#[command(version, args_override_self = true)]
pub struct TrainArgs {
    /// Optimizer steps to run (0: none, only --sample from --init-params).
    #[arg(long, default_value_t = 100, value_parser = count::<u64>, allow_hyphen_values = true)]
    pub steps: u64,
    /// Samples per rank per micro-step.
    #[arg(long, default_value_t = 64, value_parser = positive::<usize>, allow_hyphen_values = true)]
    pub batch: usize,
    // The number flags below take values that start with `-` (`-1`, `-inf`), so that their own
    // parser says what is wrong rather than clap taking the value for a flag.
    /// Learning rate [default: 0.05 for sgd, 0.001 for adamw].
    #[arg(long, value_parser = positive_f64, allow_hyphen_values = true)]
    pub lr: Option<f64>,
    /// The update rule: sgd (with --momentum) or adamw (with --beta1, --beta2, --eps).
    #[arg(long, value_enum, default_value_t = OptimizerKind::Sgd)]
    pub optimizer: OptimizerKind,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9, value_parser = non_negative_f64, allow_hyphen_values = true)]
    pub momentum: f64,
    /// Weight decay [default: 0 for sgd, 0.01 for adamw].
    #[arg(long, value_parser = non_negative_f64, allow_hyphen_values = true)]
    pub weight_decay: Option<f64>,
    /// AdamW's first-moment decay, in [0, 1).
    #[arg(long, default_value_t = 0.9, value_parser = beta, allow_hyphen_values = true)]
    pub beta1: f64,
    /// AdamW's second-moment decay, in [0, 1).
    #[arg(long, default_value_t = 0.999, value_parser = beta, allow_hyphen_values = true)]
    pub beta2: f64,
    /// AdamW's term added to the denominator.
    #[arg(long, default_value = "1e-8", value_parser = non_negative_f64, allow_hyphen_values = true)]
    pub eps: f64,
    /// The learning rate over the run: `constant` (--lr on every step), or nanoGPT's linear
    /// warm-up over the first W steps and cosine decay to the rate M at step U:
    /// `cosine:warmup=W,until=U,min=M`.
    #[arg(long, value_name = "SCHEDULE", default_value_t = LrSchedule::Constant, value_parser = parse_lr_schedule)]
    pub lr_schedule: LrSchedule,
    /// Which parameters --weight-decay applies to: all, or only matrices (two or more
    /// dimensions: weights and embeddings, not biases or LayerNorm's gains, as nanoGPT groups
    /// them).
    #[arg(long, value_enum, default_value_t = DecayOnArg::All)]
    pub decay_on: DecayOnArg,
    /// Measure the loss on held-out data after every N steps and after the last: the --text's
    /// last 10%, the --tokens shards named `_val`, the --data folder's t10k files, or synthetic
    /// samples training never reads (0: never) [default: never].
    #[arg(long, value_name = "N", value_parser = count::<u64>, allow_hyphen_values = true)]
    pub eval_every: Option<u64>,
    /// Batches of --batch samples per rank that each held-out measurement reads (the same ones
    /// every time).
    #[arg(long, value_name = "B", default_value_t = 20, value_parser = positive::<usize>, allow_hyphen_values = true)]
    pub eval_batches: usize,
    /// Clip the averaged gradients to this global norm before each update, as PyTorch's
    /// `clip_grad_norm_` (the updates then wait for every bucket's sums); `off`: no clipping
    /// [default: off].
    #[arg(long, value_name = "MAX|off", value_parser = parse_clip, allow_hyphen_values = true)]
    pub clip_grad_norm: Option<ClipNorm>,
    /// Dropout while training: the share of activations each `Dropout` layer of the model zeroes
    /// (the others scaled by 1/(1-P), as PyTorch's), its masks drawn from --seed; the held-out
    /// loss and --sample drop nothing.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = dropout_rate, allow_hyphen_values = true)]
    pub dropout: f32,
    /// Seed of the initial parameters, of the synthetic data (a model that reads it) and of
    /// --dropout's masks.
    #[arg(long, default_value_t = 0, value_parser = count::<u64>, allow_hyphen_values = true)]
    pub seed: u64,
    /// Micro-steps per optimizer step (gradient accumulation; only the last one communicates).
    #[arg(long, default_value_t = 1, value_parser = positive::<usize>, allow_hyphen_values = true)]
    pub accumulate: usize,
    /// Threads for the matrix products of a rank that owns several cores (e.g. `mpirun --map-by
    /// slot:PE=4`). Results agree with one thread to rounding. At most 4096.
    #[arg(long, default_value_t = 1, value_parser = thread_count, allow_hyphen_values = true)]
    pub threads: usize,
    /// Print the compiled bucket schedule and exit; `=ddp`: the buckets PyTorch DDP's default
    /// arguments give this model (rebuilt: 1 MiB, then 25 MiB, in gradient-ready order).
    #[arg(long, value_name = "PLAN", num_args = 0..=1, default_missing_value = "compiled")]
    pub print_schedule: Option<PrintSchedule>,
    /// Reduce every bucket only after the whole backward (the baseline the overlap beats).
    #[arg(long, conflicts_with_all = ["compute_only", "comm_only"])]
    pub no_overlap: bool,
    /// Benchmark: skip every all-reduce (compute alone; the ranks' parameters drift apart).
    #[arg(long, conflicts_with = "comm_only")]
    pub compute_only: bool,
    /// Benchmark: only the all-reduces of the model's buckets, back to back, no compute.
    #[arg(long)]
    pub comm_only: bool,
    /// Log loss and throughput every N steps (rank 0).
    #[arg(long, default_value_t = 10, value_parser = positive::<u64>, allow_hyphen_values = true)]
    pub log_every: u64,
    /// Write the final parameters to this safetensors file (rank 0), named by their paths as
    /// PyTorch's state_dict names them (`fc1.weight`, `h.0.attn.c_attn.bias`).
    #[arg(long, value_name = "FILE")]
    pub save_params: Option<PathBuf>,
    /// The overlap report printed by rank 0 at the end: where the step's time went and how much
    /// of the communication was hidden.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub report: ReportFormat,
    /// Also print the report every N steps, over those N steps.
    #[arg(long, value_name = "N", value_parser = positive::<u64>, allow_hyphen_values = true)]
    pub report_every: Option<u64>,
    /// Write every rank's spans as one Chrome trace-event file (open it in Perfetto or
    /// chrome://tracing): one process per rank, compute and communication tracks.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Draw one representative step (the median one) as an SVG timeline (a FILE whose name ends
    /// in .svg, or has no extension).
    #[arg(long, value_name = "FILE", value_parser = clap::builder::OsStringValueParser::new().try_map(svg_file))]
    pub timeline: Option<PathBuf>,
    /// Emulate an interconnect by holding each all-reduce until the ring cost model says it would
    /// finish: nvlink4, ib-ndr, ib-hdr, 100gbe, 10gbe, or e.g. latency=5us,bandwidth=25GB/s (a key
    /// left out costs nothing: latency=5us alone has unlimited bandwidth).
    #[arg(long, value_name = "LINK", value_parser = parse_link)]
    pub link: Option<Link>,
    /// Where to train: cpu, or cuda (one GPU per process; needs a build with `--features cuda`).
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// Print the NVIDIA driver's CUDA version, where cuBLAS, NVRTC and NCCL were found and the
    /// OpenBLAS kernels the host side runs, then exit (needs a build with `--features cuda`).
    #[arg(long)]
    pub cuda_libraries: bool,
    /// The GPU to use with --device cuda [default: the MPI local rank].
    #[arg(long, value_name = "N", value_parser = count::<usize>, allow_hyphen_values = true)]
    pub gpu: Option<usize>,
    /// What sums the gradients: shared memory when every rank is on one node (auto), or
    /// OpenMPI's all-reduce.
    #[arg(long, value_enum, default_value_t = Transport::Auto)]
    pub all_reduce: Transport,
    /// The format gradients travel in between ranks, for every bucket: fp32, or bf16 / fp16
    /// (half the bytes; each rank's values rounded once to be sent, summed in FP32, the sum
    /// rounded once) [default: the model's `grad_comm`, see --print-schedule]. A model compiled
    /// with `grad_comm = powersgd(..)` then sends its buckets whole, in this format (still
    /// through PowerSGD's code path, which --shard-optimizer cannot take).
    #[arg(long, value_name = "FORMAT", value_parser = str::parse::<WireFormat>)]
    pub grad_comm: Option<WireFormat>,
    /// Write checkpoints (parameters, optimizer state, step, data position) into DIR: at the
    /// end, and every --save-every steps. Rank 0 writes; a crash never leaves a torn one.
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    /// Replace another run's checkpoints found in the --save folder (without it, that folder
    /// must be empty of checkpoints, or be the --resume folder).
    #[arg(long, requires = "save")]
    pub overwrite: bool,
    /// Checkpoint every N steps (needs --save).
    #[arg(
        long,
        value_name = "N",
        requires = "save",
        value_parser = positive::<u64>,
        allow_hyphen_values = true
    )]
    pub save_every: Option<u64>,
    /// Continue from the newest checkpoint in DIR; --steps stays the total to reach.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Start from the parameters in FILE instead of the seed's initialisation: a safetensors file
    /// with PyTorch's state_dict names, as --save-params writes or PyTorch's
    /// `save_file(model.state_dict(), FILE)` does for a twin. Loaded as strictly as
    /// `load_state_dict`: every parameter, with its shape, and nothing else. Every rank reads it.
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub init_params: Option<PathBuf>,
    /// Fail, naming the ranks waited for, when start-up, a wait point or a collective blocks
    /// longer than this, e.g. 60s, 500ms, 2m; `off` waits as long as the job lives. The others'
    /// wait for rank 0's checkpoint write is bounded by this or 30 minutes, whichever is longer.
    /// [default: 10m]
    #[arg(long, value_name = "TIME", value_parser = parse_timeout, allow_hyphen_values = true)]
    pub comm_timeout: Option<Timeout>,
    /// Stop with an error naming the parameter and step when a reduced gradient is NaN or
    /// infinite.
    #[arg(long)]
    pub check_finite: bool,
    /// Keep optimizer state for this rank's 1/N of every bucket only (ZeRO-1): buckets are
    /// reduce-scattered, each rank updates its slice, the updated slices are all-gathered; the
    /// same parameters as without, less memory [default: the model's `shard_optimizer`].
    #[arg(long, overrides_with = "no_shard_optimizer")]
    pub shard_optimizer: bool,
    /// Keep the whole optimizer state on every rank, whatever the model's `shard_optimizer` says.
    #[arg(long, overrides_with = "shard_optimizer")]
    pub no_shard_optimizer: bool,
    /// Train on MNIST-format (IDX) files in DIR (train-images-idx3-ubyte, train-labels-idx1-ubyte)
    /// instead of the synthetic set.
    #[arg(long, value_name = "DIR", conflicts_with = "text")]
    pub data: Option<PathBuf>,
    /// Train a language model on the characters of a UTF-8 text file, as nanoGPT's
    /// shakespeare_char: its sorted distinct characters are the vocabulary, windows of --context
    /// characters from its first 90% the samples, each position's next character the label.
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// Train a language model on llm.c's token shards: a folder's *_train.bin or *_train_NNNNNN.bin
    /// files (its *_val.bin or *_val_NNNNNN.bin files are held out), or one file (and its `val`
    /// namesake). Windows of --context tokens, one after another, are the samples (`prepare` writes
    /// shards from a text).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["text", "data"])]
    pub tokens: Option<PathBuf>,
    /// Characters (--text) or tokens (--tokens) per sample [default: the rows of the model's
    /// PositionEmbedding].
    #[arg(long, value_name = "N", value_parser = positive::<usize>, allow_hyphen_values = true)]
    pub context: Option<usize>,
    /// After training, print N characters the model generates (rank 0), as nanoGPT's sample.py:
    /// from a newline (the vocabulary's first character where it has none), each drawn from the
    /// next-character distribution. The characters are
    /// --text's, those of the vocabulary.txt beside --tokens shards (`prepare` writes it), or, with
    /// --steps 0, those --init-params records; with --tokenizer, N GPT-2 tokens print as text.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = count::<usize>, allow_hyphen_values = true)]
    pub sample: usize,
    /// --sample's temperature: below 1 sharpens, above 1 flattens.
    #[arg(long, default_value_t = 0.8, value_parser = temperature, allow_hyphen_values = true)]
    pub temperature: f32,
    /// --sample draws among the K likeliest tokens only (characters, or GPT-2 tokens with --tokenizer).
    #[arg(long, value_name = "K", default_value_t = 200, value_parser = positive::<usize>, allow_hyphen_values = true)]
    pub top_k: usize,
    /// The text --sample continues, printed before what it draws, as nanoGPT's sample.py `start`;
    /// `FILE:path` reads it from a file. Every character must be one the model was trained on, or,
    /// with --tokenizer, it is read as GPT-2's tokens [default: a newline, or with --tokenizer its
    /// end-of-text token].
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub start: Option<String>,
    /// llm.c's tokenizer file (gpt2_tokenizer.bin, which its train_gpt2.py writes): --sample prints
    /// the GPT-2 token ids of --tokens shards, or of --init-params alone, as the text they stand
    /// for, from its end-of-text token as llm.c's samples start, or from a --start encoded as
    /// GPT-2's tokens (tiktoken's, whose ids are the order of GPT-2's merges).
    #[arg(long, value_name = "FILE", conflicts_with = "text")]
    pub tokenizer: Option<PathBuf>,
    /// Write this run's measured per-layer times as a profile for
    /// `#[distributed_model(buckets = profile("FILE"))]` (rank 0, at the end).
    #[arg(long, value_name = "FILE")]
    pub write_profile: Option<PathBuf>,
    /// Predict this model's step on another cluster from the per-layer times measured in this
    /// run, for the compiled plan and the alternatives: world=64,link=ib-ndr (repeatable).
    #[arg(long, value_name = "CLUSTER", value_parser = parse_cluster)]
    pub simulate: Vec<Cluster>,
    /// The flags the command line gave, by id (`beta1`, `top_k`), not those left at their
    /// defaults: a flag given that the run does not read gets a note (`unused_flags`). Filled
    /// by `from_matches` only: parsed otherwise, the arguments count as all defaults.
    #[arg(skip)]
    given: BTreeSet<String>,
    /// Which of an example's compiled shapes runs, where it holds several (`ModelShapes`): the
    /// ranks compare it before anything else.
    #[arg(skip)]
    pub(crate) model_shape: Option<String>,
}

impl TrainArgs {
    /// The flags `matches` holds, with which of them the command line gave.
    pub fn from_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = TrainArgs::from_arg_matches(matches)?;
        // Flags only: clap also lists the struct's own group (`TrainArgs`) once any flag is given.
        let flags: Vec<Id> =
            <TrainArgs as clap::CommandFactory>::command().get_arguments().map(|a| a.get_id().clone()).collect();
        let typed =
            |id: &&Id| flags.contains(id) && matches.value_source(id.as_str()) == Some(ValueSource::CommandLine);
        args.given = matches.ids().filter(typed).map(|id| id.to_string()).collect();
        Ok(args)
    }

    /// Whether the command line gave the flag of field `id` (`"beta1"`), rather than its default.
    pub fn gave(&self, id: &str) -> bool {
        self.given.contains(id)
    }

    /// The clap ids of every flag the command line gave.
    pub fn given(&self) -> impl Iterator<Item = &str> {
        self.given.iter().map(String::as_str)
    }

    /// The flags every rank must share that `TrainConfig` does not hold (the `Trainer` compares
    /// those): which data, its samples' length (`--context`, or the model's `model_context` when
    /// not given, so that giving the default is no difference), the seed that picks them, the
    /// starting point.
    pub fn shared_beyond_train_config(&self, model_context: Option<usize>) -> Vec<(&'static str, String)> {
        let set = |present: bool| if present { "set" } else { "not set" }.to_string();
        let data = match (&self.data, &self.text, &self.tokens) {
            (Some(_), ..) => "--data",
            (_, Some(_), _) => "--text",
            (.., Some(_)) => "--tokens",
            _ => "the synthetic set",
        };
        vec![
            ("--data, --text or --tokens", data.to_string()),
            ("--context", self.context.or(model_context).map_or_else(|| "the model's".into(), |n| n.to_string())),
            ("--seed", self.seed.to_string()),
            ("--init-params", set(self.init_params.is_some())),
            // Rank 0 samples: a rank asking alone would be dropped without a word.
            ("--sample", self.sample.to_string()),
            ("--temperature", self.temperature.to_string()),
            ("--top-k", self.top_k.to_string()),
            // Quoted when given, so that no prompt reads as the default.
            ("--start", self.start.as_ref().map_or_else(|| "not given".into(), |start| format!("{start:?}"))),
            ("--tokenizer", set(self.tokenizer.is_some())),
        ]
    }

    /// Which of an example's compiled shapes runs (`--layers 6 --heads 6 --width 384`), where it
    /// holds several.
    pub fn model_shape(&self) -> Option<&str> {
        self.model_shape.as_deref()
    }

    /// `--eval-every`, unless it is 0 (never).
    pub fn validation_every(&self) -> Option<u64> {
        self.eval_every.filter(|&n| n > 0)
    }
}
