//! What a sample's tokens print as: characters (a text's, the `vocabulary.txt` beside token
//! shards, or those a parameters file records), or, with `--tokenizer FILE`, the bytes llm.c's
//! tokenizer file gives each of GPT-2's token ids.

use std::path::Path;

use overlap_runtime::token_table::TokenTable;
use overlap_runtime::training_data::TrainingData;
use overlap_runtime::{Dataset, DistributedModel, Error, Result};

use crate::args::TrainArgs;
use crate::datasets;

/// How a sample's token ids become text.
#[derive(Debug)]
pub(crate) enum TokenText {
    /// Token `i` is the `i`-th character.
    Characters(Vec<char>),
    /// Token `i` is the `i`-th entry of llm.c's tokenizer file: bytes, not always whole
    /// characters.
    Bytes(TokenTable),
}

impl TokenText {
    /// The tokens it prints: the ids a sample draws among.
    pub(crate) fn len(&self) -> usize {
        match self {
            TokenText::Characters(vocab) => vocab.len(),
            TokenText::Bytes(table) => table.len(),
        }
    }

    /// What a sample's heading counts.
    pub(crate) fn unit(&self) -> &'static str {
        match self {
            TokenText::Characters(_) => "characters",
            TokenText::Bytes(_) => "tokens",
        }
    }
}

/// What `--sample` prints the tokens of `data` as, refused before training where it cannot: the
/// table of `--tokenizer` (which must hold every id of `data`'s shards, and which ids that stand
/// for characters refuse), else the characters `datasets::sample_vocabulary` finds (`recorded`:
/// those `--init-params` records).
pub(crate) fn sample_text<M: DistributedModel>(
    data: &TrainingData,
    recorded: Option<&str>,
    args: &TrainArgs,
) -> Result<TokenText> {
    let Some(file) = &args.tokenizer else {
        return datasets::sample_vocabulary::<M>(data, recorded, args).map(TokenText::Characters);
    };
    let table = tokenizer_table::<M>(file, args)?;
    let TrainingData::Tokens(shards) = data else {
        return Err(Error::Config(format!(
            "--tokenizer {} prints the token ids of token shards (GPT-2's, as llm.c writes them): give --tokens PATH",
            file.display()
        )));
    };
    // Where the ids are listed as characters: beside the shards, in --init-params, or in the
    // checkpoint resumed (whose vocabulary the shards adopted).
    let characters = match (shards.vocabulary_file(), recorded, Dataset::vocabulary(shards)) {
        (Some(path), ..) => Some(path.display().to_string()),
        (None, Some(_), _) => Some("the vocabulary --init-params records".into()),
        (None, None, Some(_)) => Some("the vocabulary the checkpoint resumed records".into()),
        (None, None, None) => None,
    };
    refuse_character_ids(file, characters)?;
    let (largest, shard) = shards.max_token();
    if usize::from(largest) >= table.len() {
        return Err(Error::Config(format!(
            "--tokenizer {}: {} tokens, but {} holds token id {largest}: it is not these shards' tokenizer",
            file.display(),
            table.len(),
            shard.display()
        )));
    }
    Ok(TokenText::Bytes(table))
}

/// Refuses `--tokenizer` over token ids that stand for characters (`characters` says where they
/// are listed): printed as GPT-2's bytes, they would be another text.
pub(crate) fn refuse_character_ids(file: &Path, characters: Option<String>) -> Result<()> {
    match characters {
        Some(source) => Err(Error::Config(format!(
            "--tokenizer {}: these token ids are characters, as {source} lists them, not GPT-2's tokens; without \
             --tokenizer a sample prints them as those characters",
            file.display()
        ))),
        None => Ok(()),
    }
}

/// `--tokenizer FILE`, read and checked against the model: no more tokens than it reads and
/// predicts (GPT-2's 50257 fit the padded 50304 of nanoGPT's and llm.c's models).
pub(crate) fn tokenizer_table<M: DistributedModel>(file: &Path, args: &TrainArgs) -> Result<TokenTable> {
    let table = read_tokenizer(file)?;
    let limit = datasets::readable_tokens::<M>()?;
    if table.len() > limit {
        // A program of several shapes may hold one with more.
        let shape = args
            .model_shape()
            .map_or(String::new(), |shape| format!(" in this program's shape `{shape}` (--help lists its others)"));
        return Err(Error::Config(format!(
            "--tokenizer {}: {} tokens, but {} reads and predicts {limit}{shape}",
            file.display(),
            table.len(),
            M::SCHEDULE.model
        )));
    }
    Ok(table)
}

/// The tokenizer file `file` of `--tokenizer`, read and checked; an error names the flag.
pub(crate) fn read_tokenizer(file: &Path) -> Result<TokenTable> {
    TokenTable::read(file).map_err(|e| match e {
        Error::Dataset(why) => Error::Config(format!("--tokenizer {why}")),
        other => crate::flags::naming("--tokenizer", other),
    })
}
