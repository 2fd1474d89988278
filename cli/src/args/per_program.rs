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
    // Its help names `--sample`, hidden here: a model of features samples nothing.
    command.mut_arg("steps", |arg| arg.help("Optimizer steps to run (at least 1)"))
}

/// `command` under the program's own name (`gpt --version` says `gpt 0.1.0`, not the crate's).
pub(crate) fn named(command: clap::Command) -> clap::Command {
    let program = std::env::args_os().next().map(PathBuf::from);
    match program.as_deref().and_then(std::path::Path::file_name).and_then(|n| n.to_str()) {
        Some(name) => command.name(name.to_string()),
        None => command,
    }
}
