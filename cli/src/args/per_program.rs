//! The flags as each program shows them: under its own name, without the data flags its model
//! cannot read.

use std::path::PathBuf;

use overlap_runtime::model::token_rows;
use overlap_runtime::DistributedModel;

/// The flags only a language model reads (token ids in, characters out), by clap id.
const LANGUAGE_MODEL_ONLY: [&str; 8] =
    ["text", "tokens", "context", "sample", "temperature", "top_k", "start", "tokenizer"];

/// `command` with the data flags `M` cannot read hidden from `--help` (`mlp` reads no text): they
/// still parse, and a run given one says why it cannot use it. `--data` is each model's own: images
/// for a model of feature rows, a text or token shards for a language model.
pub(crate) fn for_model<M: DistributedModel>(command: clap::Command) -> clap::Command {
    hide_unreadable(command, token_rows::<M>().is_some())
}

/// `for_model`, for a model that reads token ids (`reads_tokens`) or feature rows.
pub(super) fn hide_unreadable(command: clap::Command, reads_tokens: bool) -> clap::Command {
    if reads_tokens {
        return command.mut_arg("data", |arg| {
            arg.value_name("PATH")
                .help("A text file, read as --text, or token shards (a folder or a file), read as --tokens")
        });
    }
    let command = LANGUAGE_MODEL_ONLY.iter().fold(command, |command, id| command.mut_arg(*id, |arg| arg.hide(true)));
    // Their help names `--sample`, `--text` and `--tokens`, hidden here: a model of features
    // samples nothing and reads no text.
    command
        .mut_arg("steps", |arg| arg.help("Optimizer steps to run (at least 1)"))
        .mut_arg("eval_every", |arg| {
            // Its default said in words only where clap shows none (an example may set one).
            let default = if arg.get_default_values().is_empty() { " [default: never]" } else { "" };
            arg.help(format!(
                "Measure the loss on held-out data after every N steps and after the last: the --data folder's t10k \
                 files, or synthetic samples training never reads (0: never){default}"
            ))
        })
        .mut_arg("dropout", |arg| {
            arg.help(
                "Dropout while training: the share of activations each `Dropout` layer of the model zeroes (the \
                 others scaled by 1/(1-P), as PyTorch's), its masks drawn from --seed; the held-out loss drops nothing",
            )
        })
}

/// What `main::<M>()`'s `--help` says the program trains, from `M`'s schedule: examples of one
/// command line told apart (`uneven` and `uneven_ddp`, `mlp` and `mlp_zero`).
pub(crate) fn about<M: DistributedModel>() -> String {
    let s = &M::SCHEDULE;
    let buckets = s.buckets.len();
    let millions = s.param_count() as f64 / 1e6;
    let mut plan = format!("{millions:.2} M parameters in {buckets} bucket{}", if buckets == 1 { "" } else { "s" });
    if let Some(format) = s.grad_comm() {
        plan.push_str(&format!(", gradients travelling as {format}"));
    }
    if s.shard_optimizer {
        plan.push_str(", optimizer state sharded over the ranks");
    }
    let data = if token_rows::<M>().is_some() {
        "a text (--text) or token shards (--tokens)"
    } else {
        "a deterministic synthetic classification set, or MNIST-format files (--data)"
    };
    format!(
        "Train `{}` ({plan}; --print-schedule shows the plan) on {data}. Run it with `mpirun -n N` for N \
         data-parallel ranks; the global batch is batch x N x accumulate.",
        s.model
    )
}

/// `command` under the program's own name (`gpt --version` says `gpt 0.1.0`, not the crate's).
pub(crate) fn named(command: clap::Command) -> clap::Command {
    let program = std::env::args_os().next().map(PathBuf::from);
    match program.as_deref().and_then(std::path::Path::file_name).and_then(|n| n.to_str()) {
        Some(name) => command.name(name.to_string()),
        None => command,
    }
}
