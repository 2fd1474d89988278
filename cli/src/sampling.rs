//! Sampling from a language model on the command line: `--sample N` after training, or from
//! the parameters of `--init-params` alone (`--steps 0`).

use std::path::Path;

use overlap_runtime::params_file::FileNotes;
use overlap_runtime::sample::{generate_each, SampleConfig};
use overlap_runtime::token_table::Utf8Stream;
use overlap_runtime::train::agree_on_outcome;
use overlap_runtime::{command_line::console, Communicator, DistributedModel, Error, Result};

use crate::args::{self, TrainArgs};
pub(crate) use crate::sample_prompt::{prompt, Prompt};
use crate::sample_text::TokenText;
use crate::{datasets, unused_flags};

/// `--steps 0`: no training, a sample from the parameters `--init-params` loads, in the
/// characters of `--text` or of the `vocabulary.txt` beside `--tokens`' shards, or else in those
/// the file records; or, with `--tokenizer`, as the GPT-2 tokens llm.c's tokenizer file decodes.
pub(crate) fn sample_only<M: DistributedModel>(args: &TrainArgs, comm: &Communicator) -> Result<()> {
    let (Some(_), true, false) = (&args.init_params, args.sample > 0, args.comm_only) else {
        let language_model = matches!(M::DEVICE_OPS.first(), Some(overlap_runtime::DeviceOp::Embedding { .. }));
        // `--resume` in place of `--init-params`: the checkpoint's parameters file is what serves.
        let checkpoint = (args.init_params.is_none() && !args.comm_only)
            .then(|| args.resume.as_deref().and_then(overlap_runtime::checkpoint::latest_model_file))
            .flatten();
        return Err(Error::Config(if let (true, Some(file)) = (language_model, checkpoint) {
            format!(
                "--steps 0 trains nothing, and resumes nothing: to sample from the checkpoint, give \
                 `--init-params {} --sample N` in place of --resume",
                file.display()
            )
        } else if language_model {
            "--steps 0 trains nothing: it samples (--sample N) from the parameters of --init-params FILE, in the \
             characters it records or a --text's, or as GPT-2's tokens through --tokenizer FILE"
                .into()
        } else {
            format!(
                "--steps 0 trains nothing: give --steps 1 or more ({} is no language model to sample)",
                M::SCHEDULE.model
            )
        }));
    };
    unused_flags::refuse_with_sample_only(args)?;
    // Sampling runs the products outside `fit`, which sets this for training.
    if let (Some(note), 0) = (overlap_runtime::command_line::use_for_products(args.threads), comm.rank()) {
        console::err_line(&format!("note: {note}"));
    }
    if let Some(file) = &args.tokenizer {
        let read = crate::sample_text::tokenizer_table::<M>(file, args);
        let table = agree_on_outcome(comm, read, "read its copy of --tokenizer")?;
        let context = datasets::sample_context::<M>(args)?;
        // Shards listing characters hold character ids; their files are not read otherwise.
        let listed = match &args.tokens {
            Some(tokens) => overlap_runtime::token_shards::vocabulary_beside(tokens)
                .map_err(|e| crate::flags::naming("--tokens", e))?
                .map(|(path, _)| path.display().to_string()),
            None => None,
        };
        crate::sample_text::refuse_character_ids(file, listed)?;
        let text = TokenText::Bytes(table);
        let (model, notes) = crate::start::starting_model::<M>(args, comm, None)?;
        let recorded = notes.vocabulary.as_ref().map(|_| "the vocabulary --init-params records".to_string());
        crate::sample_text::refuse_character_ids(file, recorded)?;
        return print_on_rank_0(comm, &model, &text, sampled_positions(args, context, &notes), args);
    }
    let (text_vocab, context) = match (&args.text, &args.tokens) {
        (Some(file), _) => datasets::vocabulary_text::<M>(file, args).map(|(vocab, context)| (Some(vocab), context))?,
        (None, Some(tokens)) => (datasets::token_vocabulary::<M>(tokens)?, datasets::sample_context::<M>(args)?),
        (None, None) => (None, datasets::sample_context::<M>(args)?),
    };
    let (model, notes) =
        crate::start::starting_model::<M>(args, comm, text_vocab.as_ref().map(|v| v.iter().collect()))?;
    let vocab = match (text_vocab, &notes.vocabulary) {
        (Some(vocab), recorded) => {
            if let (0, None, Some(text)) = (comm.rank(), recorded, &args.text) {
                console::err_line(&format!(
                    "note: --init-params records no vocabulary (token shards without one trained it?): its token ids \
                     are read as the sorted characters of {}",
                    text.display()
                ));
            }
            vocab
        }
        (None, Some(recorded)) => datasets::recorded_vocabulary::<M>(recorded)?,
        (None, None) => {
            return Err(Error::Config(format!(
                "--init-params {} records no vocabulary to print its tokens as characters{}: give the text it was \
                 trained on (--text FILE), or, for GPT-2's token ids, llm.c's tokenizer file (--tokenizer FILE)",
                args.init_params.as_deref().unwrap_or(Path::new("")).display(),
                match &args.tokens {
                    Some(tokens) =>
                        format!(", nor is there a vocabulary.txt beside the shards of --tokens {}", tokens.display()),
                    None => String::new(),
                }
            )))
        }
    };
    let text = TokenText::Characters(vocab);
    print_on_rank_0(comm, &model, &text, sampled_positions(args, context, &notes), args)
}

/// Rank 0 alone reads the prompt (a pipe gives it once) and prints the sample; a prompt it
/// refuses stops every rank.
fn print_on_rank_0<M: DistributedModel>(
    comm: &Communicator,
    model: &M,
    text: &TokenText,
    positions: usize,
    args: &TrainArgs,
) -> Result<()> {
    let read = if comm.rank() == 0 { prompt(args, text).map(Some) } else { Ok(None) };
    match agree_on_outcome(comm, read, "read the --start prompt")? {
        Some(prompt) => print_sample(model, text, &prompt, positions, args),
        None => Ok(()),
    }
}

/// How far back a sample from `--init-params` reads: `--context` where given (with a note when
/// it passes the positions the file was trained on, whose rows of the position table training
/// never reached), else those positions, where the file records them, else `context` (the
/// position table's rows).
fn sampled_positions(args: &TrainArgs, context: usize, notes: &FileNotes) -> usize {
    match (args.context, notes.positions) {
        (None, Some(trained)) => trained.min(context),
        (Some(asked), Some(trained)) if asked > trained => {
            console::err_line(&format!(
                "note: --init-params was trained on sequences of {trained} positions; sampling reads back {asked}, \
                 through positions training never reached"
            ));
            asked
        }
        _ => context,
    }
}

/// `--sample N`: N tokens from the trained model continuing `prompt` (`--start`, by default
/// a newline, or the end-of-text token of `--tokenizer`), each drawn from at most `positions`
/// before it, printed as `text` says, on stdout as they are drawn (a long sample shows as it
/// comes, and a stop keeps what was printed), after the prompt's text; on stderr with
/// `--report json`, whose document is then all that stdout holds.
pub(crate) fn print_sample<M: DistributedModel>(
    model: &M,
    text: &TokenText,
    prompt: &Prompt,
    positions: usize,
    args: &TrainArgs,
) -> Result<()> {
    let config =
        SampleConfig { tokens: args.sample, temperature: args.temperature, top_k: Some(args.top_k), seed: args.seed };
    let print = match args.report {
        args::ReportFormat::Json => console::err,
        _ => console::out,
    };
    // Refused before the heading, so that an error is all that a refused sample prints.
    overlap_runtime::sample::check_request::<M>(&prompt.tokens, (text.len(), positions), &config)?;
    // The prompt's tokens: its characters, or the GPT-2 tokens its text became.
    let after = match &prompt.shown {
        Some(_) => format!(" after a prompt of {}", prompt.tokens.len()),
        None => String::new(),
    };
    print(&format!(
        "sample ({} {}{after}, temperature {}, top-k {}):\n",
        args.sample,
        text.unit(),
        args.temperature,
        args.top_k
    ));
    if let Some(text) = &prompt.shown {
        print(text);
    }
    let drawn = match text {
        TokenText::Characters(vocab) => {
            let mut utf8 = [0; 4];
            generate_each(model, &prompt.tokens, (vocab.len(), positions), &config, |token| {
                print(vocab[token].encode_utf8(&mut utf8))
            })
        }
        // A token's bytes may end inside a character: the stream holds them until it is whole.
        TokenText::Bytes(table) => {
            let (mut stream, mut out) = (Utf8Stream::default(), |piece: &str| print(piece));
            let drawn = generate_each(model, &prompt.tokens, (table.len(), positions), &config, |token| {
                stream.push(table.bytes(token), &mut out)
            });
            stream.finish(&mut out);
            drawn
        }
    };
    print("\n");
    drawn
}
