//! The data the flags choose: the synthetic set, MNIST-format files (`--data`), a text's
//! characters (`--text`) or llm.c's token shards (`--tokens`), each checked against the model
//! before step 1, and its held-out counterpart for `--eval-every`.

use std::path::Path;

use overlap_runtime::data::SyntheticClassification;
use overlap_runtime::model::{position_rows, token_rows, vocabulary_limit};
use overlap_runtime::text::{file_vocabulary, CharText};
use overlap_runtime::token_shards::{is_held_out_file, locate, shard_doubts, val_namesake, TokenShards, MAGIC};
use overlap_runtime::training_data::TrainingData;
use overlap_runtime::{Dataset, DistributedModel, Error, Result};

use crate::args::TrainArgs;
use overlap_runtime::command_line::console;

/// `--data PATH` given to a language model (`gpt --data FILE`), as the flag it stands for there:
/// `--tokens` for a folder or a file that starts as llm.c's shards do (their magic number),
/// `--text` for any other file. `None` where there is nothing to read so; rank 0 says which flag.
pub(crate) fn data_for_language_model<M: DistributedModel>(args: &TrainArgs, rank: usize) -> Option<TrainArgs> {
    let path = args.data.as_ref().filter(|_| token_rows::<M>().is_some())?;
    let mut read = args.clone();
    read.data = None;
    // Only a regular file is looked into: the bytes read from a pipe would be lost to its reader.
    let regular = std::fs::metadata(path).is_ok_and(|m| m.is_file());
    let flag = if path.is_dir() || (regular && starts_as_token_shard(path)) {
        read.tokens = Some(path.clone());
        "--tokens"
    } else {
        read.text = Some(path.clone());
        "--text"
    };
    if rank == 0 {
        let stream = path.exists() && !path.is_dir() && !regular;
        let why = if stream { " (not a regular file; give --tokens for token shards)" } else { "" };
        console::err_line(&format!("note: --data {0} on a language model: read as {flag} {0}{why}", path.display()));
    }
    Some(read)
}

/// Whether the regular file `path` starts with llm.c's shard magic number as its first int32.
fn starts_as_token_shard(path: &Path) -> bool {
    let mut first = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut first)).is_ok()
        && i32::from_le_bytes(first) == MAGIC
}

/// The training data the flags choose (the synthetic set unless `--text`, `--tokens` or `--data`
/// names one), shaped for the model's input and output.
pub(crate) fn training_data<M: DistributedModel>(args: &TrainArgs) -> Result<TrainingData> {
    let schedule = M::SCHEDULE;
    let (features, classes) = io_widths::<M>()?;
    if let Some(file) = &args.text {
        return text_data::<M>(file, args, features, classes);
    }
    if let Some(path) = &args.tokens {
        return token_data::<M>(path, args, features);
    }
    if token_rows::<M>().is_some() {
        // The synthetic set holds features, not token ids (`--data` was read as a text or shards).
        return Err(Error::Config(format!(
            "{} reads token ids: give it a text (--text FILE) or token shards (--tokens PATH)",
            schedule.model
        )));
    }
    Ok(match &args.data {
        None => {
            TrainingData::Synthetic(SyntheticClassification::new(args.seed.wrapping_add(0x5eed), features, classes))
        }
        Some(dir) => TrainingData::from_idx_dir(dir, features, classes)?,
    })
}

/// The model's input features and output classes.
fn io_widths<M: DistributedModel>() -> Result<(usize, usize)> {
    let schedule = M::SCHEDULE;
    schedule.io_widths().ok_or_else(|| {
        Error::Config(format!("{} has no layer with fixed widths, so its input size is unknown", schedule.model))
    })
}

/// `--text FILE`, checked against a model that reads token ids and predicts a character.
fn text_data<M: DistributedModel>(
    file: &Path,
    args: &TrainArgs,
    features: usize,
    classes: usize,
) -> Result<TrainingData> {
    let context = context::<M>("--text", args, features)?;
    let text = CharText::from_file(file, context, args.seed).map_err(|e| crate::flags::naming("--text", e))?;
    check_vocabulary::<M>(file, text.vocab().len(), classes)?;
    Ok(TrainingData::Text(text))
}

/// `--text FILE` for a sample alone (`--steps 0`): its characters (the vocabulary) alone are
/// read, so a text shorter than a sample serves as well. With the context the flags give
/// (`--context`, or the position table's rows), which bounds how far back the sample reads.
pub(crate) fn vocabulary_text<M: DistributedModel>(file: &Path, args: &TrainArgs) -> Result<(Vec<char>, usize)> {
    let (features, classes) = io_widths::<M>()?;
    let context = context::<M>("--text", args, features)?;
    let vocab = file_vocabulary(file).map_err(|e| crate::flags::naming("--text", e))?;
    check_vocabulary::<M>(file, vocab.len(), classes)?;
    Ok((vocab, context))
}

/// The context of a sample from `--init-params` alone (`--steps 0` without `--text`):
/// `--context`, or the position table's rows.
pub(crate) fn sample_context<M: DistributedModel>(args: &TrainArgs) -> Result<usize> {
    let (features, _) = io_widths::<M>()?;
    context::<M>("--sample", args, features)
}

/// `--tokens PATH` for a sample alone (`--steps 0`): the characters of the `vocabulary.txt`
/// beside its shards, which are not read; `None` where there is none (the characters
/// `--init-params` records then serve).
pub(crate) fn token_vocabulary<M: DistributedModel>(tokens: &Path) -> Result<Option<Vec<char>>> {
    match overlap_runtime::token_shards::vocabulary_beside(tokens).map_err(|e| crate::flags::naming("--tokens", e))? {
        Some((file, vocabulary)) => printable::<M>(&file, &vocabulary).map(Some),
        None => Ok(None),
    }
}

/// The characters of the vocabulary `--init-params` or the checkpoint resumed records, which the
/// model must predict.
pub(crate) fn recorded_vocabulary<M: DistributedModel>(recorded: &str) -> Result<Vec<char>> {
    printable::<M>(Path::new("--init-params' vocabulary"), recorded)
}

/// `vocabulary` (read from `source`) as the characters a sample prints, refused when the model
/// cannot read and predict that many tokens.
fn printable<M: DistributedModel>(source: &Path, vocabulary: &str) -> Result<Vec<char>> {
    let characters: Vec<char> = vocabulary.chars().collect();
    check_vocabulary::<M>(source, characters.len(), readable_tokens::<M>()?)?;
    Ok(characters)
}

/// The token ids `M` reads and predicts: its token embedding's rows, or else its outputs.
pub(crate) fn readable_tokens<M: DistributedModel>() -> Result<usize> {
    Ok(vocabulary_limit::<M>().unwrap_or(io_widths::<M>()?.1))
}

/// What `--sample` prints the tokens as: the text's characters, or the vocabulary beside the
/// token shards, or else the one `--init-params` records (`recorded`); shards without one, from
/// a file without one, have none.
pub(crate) fn sample_vocabulary<M: DistributedModel>(
    data: &TrainingData,
    recorded: Option<&str>,
    args: &TrainArgs,
) -> Result<Vec<char>> {
    let TrainingData::Tokens(shards) = data else {
        return match data {
            // Checked against the model when the text was read.
            TrainingData::Text(text) => Ok(text.vocab().to_vec()),
            _ => Err(Error::Config(
                "--sample prints the characters a language model generates: train one on --text FILE or --tokens \
                 PATH"
                    .into(),
            )),
        };
    };
    // The shards' vocabulary.txt may hold characters the training shards never use; shards
    // without one may have been given the one a checkpoint records (`adopt_recorded_vocabulary`).
    let given = Dataset::vocabulary(shards);
    match (shards.vocabulary_file().zip(given.clone()), given.as_deref().or(recorded)) {
        (Some((file, vocabulary)), _) => printable::<M>(&file, &vocabulary),
        (None, Some(recorded)) => recorded_vocabulary::<M>(recorded),
        (None, None) => Err(Error::Config(format!(
            "--sample prints characters, but --tokens {} has no vocabulary.txt beside its shards (`prepare` writes \
             one) to read its token ids as, nor does --init-params record one; GPT-2's token ids print through \
             llm.c's tokenizer file (--tokenizer gpt2_tokenizer.bin)",
            args.tokens.as_deref().unwrap_or(Path::new("")).display()
        ))),
    }
}

/// No more distinct characters than the model predicts classes.
fn check_vocabulary<M: DistributedModel>(file: &Path, characters: usize, classes: usize) -> Result<()> {
    if characters > classes {
        return Err(Error::Config(format!(
            "{}: {characters} distinct characters, but {} predicts {classes} classes",
            file.display(),
            M::SCHEDULE.model
        )));
    }
    Ok(())
}

/// `--tokens PATH`, checked against a model that reads token ids and predicts as many classes as
/// the shards' largest token needs.
fn token_data<M: DistributedModel>(path: &Path, args: &TrainArgs, features: usize) -> Result<TrainingData> {
    let context = context::<M>("--tokens", args, features)?;
    let (train, _) = locate(path).map_err(|e| crate::flags::naming("--tokens", e))?;
    let shards = TokenShards::open(&train, context)?;
    check_tokens::<M>(&shards)?;
    Ok(TrainingData::Tokens(shards))
}

/// Notes on rank 0 what looks amiss in `--tokens`' shards (`token_shards::shard_doubts`): a
/// held-out file trained on, numbered shards that skip a number.
pub(crate) fn note_shard_doubts(args: &TrainArgs, rank: usize) {
    let (Some(path), 0) = (&args.tokens, rank) else { return };
    let Ok((train, val)) = locate(path) else { return };
    for doubt in shard_doubts(path, &train, &val) {
        console::err_line(&format!("note: --tokens {}: {doubt}", path.display()));
    }
}

/// A note where the data's characters fill at most a quarter of the model's token rows, a
/// thousand or more left (`gpt --vocab 50304 --text FILE`): those never occur, yet every step
/// computes their logits.
pub(crate) fn note_unused_rows<M: DistributedModel>(data: &TrainingData, rank: usize) {
    let (Some(vocabulary), Some(rows), 0) = (Dataset::vocabulary(data), vocabulary_limit::<M>(), rank) else { return };
    let characters = vocabulary.chars().count();
    // A few unused rows cost nothing to speak of: `gpt`'s 96 for a text of 65 characters.
    if rows / 4 >= characters.max(1) && rows - characters >= 1024 {
        console::err_line(&format!(
            "note: the data's vocabulary is {characters} characters, and {} predicts {rows} tokens: {} of them never \
             occur in the data, though every step computes their logits (a model of fewer tokens learns these \
             characters alike, and faster)",
            M::SCHEDULE.model,
            rows - characters
        ));
    }
}

/// No token past the model's vocabulary (its output classes and its token embedding's rows), nor
/// more characters in the shards' `vocabulary.txt` than it has, as `--text` refuses them: the
/// parameters a run saves record that vocabulary, and a later run refuses them for it.
fn check_tokens<M: DistributedModel>(shards: &TokenShards) -> Result<()> {
    let model = &M::SCHEDULE.model;
    // `training_data` has already refused a model without them.
    let limit = vocabulary_limit::<M>().unwrap_or(usize::MAX);
    if let (Some(file), Some(vocabulary)) = (shards.vocabulary_file(), Dataset::vocabulary(shards)) {
        check_vocabulary::<M>(&file, vocabulary.chars().count(), limit)?;
    }
    let (largest, shard) = shards.max_token();
    if usize::from(largest) >= limit {
        return Err(Error::Config(format!(
            "{}: token id {largest} is past {model}'s vocabulary of {limit} tokens",
            shard.display()
        )));
    }
    Ok(())
}

/// Tokens per sample: `--context`, at most the position embedding's rows, which are the default.
fn context<M: DistributedModel>(flag: &str, args: &TrainArgs, features: usize) -> Result<usize> {
    let model = &M::SCHEDULE.model;
    let positions = position_rows::<M>();
    if features != 1 {
        return Err(Error::Config(format!(
            "{flag} feeds token ids, one per row; {model}'s first layer takes {features} inputs (an Embedding takes 1)"
        )));
    }
    match (args.context, positions) {
        (Some(context), Some(rows)) if context > rows => {
            // A program of several shapes may hold one with more positions.
            let shape = args.model_shape().map_or(String::new(), |shape| {
                format!(
                    " in this program's shape `{shape}` (--help lists the others and the longest --context of each)"
                )
            });
            Err(Error::Config(format!(
                "--context {context}: {model}'s position embedding has rows for {rows} positions{shape}"
            )))
        }
        (Some(context), _) => Ok(context),
        (None, Some(rows)) => Ok(rows),
        (None, None) => {
            Err(Error::Config(format!("{flag} needs --context: {model} has no position embedding to take it from")))
        }
    }
}

/// Token shards without a `vocabulary.txt` read as the vocabulary `recorded` by `from` (the file
/// of `--init-params`, or the checkpoint resumed), which the run's checkpoints and parameter files
/// then record too: a later `--resume` or `--init-params` from them is checked against it, and
/// samples print it.
pub(crate) fn adopt_recorded_vocabulary(
    data: &mut TrainingData,
    recorded: Option<(&str, &str)>,
    rank: usize,
) -> Result<()> {
    let (TrainingData::Tokens(shards), Some((recorded, from))) = (data, recorded) else { return Ok(()) };
    if shards.vocabulary().is_some() {
        return Ok(());
    }
    shards.adopt_vocabulary(recorded, &format!("the vocabulary {from} records"))?;
    if rank == 0 {
        console::err_line(&format!(
            "note: --tokens {} has no vocabulary.txt: its token ids are read as the characters {from} records, which \
             the run's files record too",
            shards.name()
        ));
    }
    Ok(())
}

/// The held-out data of `data`: the text's validation split, the shards' `val` files, the IDX
/// folder's test files, or synthetic samples no training reads.
pub(crate) fn held_out<M: DistributedModel>(data: &TrainingData, args: &TrainArgs) -> Result<TrainingData> {
    match (data, &args.tokens) {
        (TrainingData::Tokens(train), Some(path)) => {
            let (_, val) = locate(path)?;
            if val.is_empty() {
                let looked_for = if path.is_dir() {
                    "no file named *_val.bin or *_val_NNNNNN.bin is in the folder".to_string()
                } else {
                    match val_namesake(path) {
                        Some(val) => {
                            format!("{} is not there (give the folder to read every shard in it)", val.display())
                        }
                        None if is_held_out_file(path) => {
                            "it is a held-out (`val`) file itself: give its `train` file, or the folder of both"
                                .to_string()
                        }
                        None => "its name has no `train` part to pair it with a `val` file".to_string(),
                    }
                };
                return Err(Error::Config(format!(
                    "--eval-every needs held-out shards beside --tokens {}: {looked_for}; or train without held-out \
                     loss (--eval-every 0)",
                    path.display()
                )));
            }
            let mut shards = TokenShards::open(&val, train.context()).map_err(|e| match e {
                Error::Dataset(why) => Error::Dataset(format!("{why} (held-out data: --eval-every 0 measures none)")),
                other => other,
            })?;
            // The vocabulary the training shards were given, when neither has a file.
            if let (None, None, Some(given)) = (shards.vocabulary(), train.vocabulary_file(), train.vocabulary()) {
                shards.adopt_vocabulary(&given, "the training shards' vocabulary")?;
            }
            if shards.vocabulary() != train.vocabulary() {
                return Err(Error::Dataset(format!("{}: another vocabulary than the training shards'", shards.name())));
            }
            // Before step 1, as the training shards are, not at the first measurement.
            check_tokens::<M>(&shards)?;
            Ok(TrainingData::Tokens(shards))
        }
        (TrainingData::Text(_) | TrainingData::Idx(_), _) => data.held_out(args.data.as_deref()).map_err(|e| match e {
            Error::Dataset(why) => Error::Dataset(format!("{why} (held-out loss: --eval-every 0 measures none)")),
            Error::Data(why) => Error::Dataset(format!("{why} (held-out loss: --eval-every 0 measures none)")),
            other => other,
        }),
        _ => data.held_out(args.data.as_deref()),
    }
}
