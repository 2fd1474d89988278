//! The command line's training sets behind one `Dataset`: the synthetic one, MNIST-format
//! files, a text's characters, or llm.c's token shards. Apart from `data`, so that the sets (which implement `Dataset`)
//! are below it and `data` imports none of them.

use crate::data::{Batch, Dataset, SyntheticClassification};
use crate::error::{Error, Result};
use crate::idx::{IdxDataset, Split};
use crate::text::CharText;
use crate::token_shards::TokenShards;

impl Dataset for TrainingData {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> Result<()> {
        match self {
            TrainingData::Synthetic(d) => Dataset::fill(d, first, rows, batch),
            TrainingData::Idx(d) => Dataset::fill(d, first, rows, batch),
            TrainingData::Text(d) => d.fill(first, rows, batch),
            TrainingData::Tokens(d) => d.fill(first, rows, batch),
        }
    }

    fn features(&self) -> usize {
        match self {
            TrainingData::Synthetic(d) => d.features(),
            TrainingData::Idx(d) => IdxDataset::features(d),
            TrainingData::Text(d) => d.features(),
            TrainingData::Tokens(d) => d.features(),
        }
    }

    fn positions(&self) -> usize {
        match self {
            TrainingData::Text(d) => d.positions(),
            TrainingData::Tokens(d) => d.positions(),
            _ => 1,
        }
    }

    fn len(&self) -> Option<u64> {
        match self {
            TrainingData::Idx(d) => Dataset::len(d),
            TrainingData::Tokens(d) => d.len(),
            // Generated samples, and a text's windows drawn at random offsets: without end.
            TrainingData::Synthetic(_) | TrainingData::Text(_) => None,
        }
    }

    fn vocabulary(&self) -> Option<String> {
        match self {
            TrainingData::Text(d) => d.vocabulary(),
            TrainingData::Tokens(d) => d.vocabulary(),
            _ => None,
        }
    }

    fn classes(&self) -> Option<usize> {
        match self {
            TrainingData::Synthetic(d) => Dataset::classes(d),
            TrainingData::Idx(d) => Dataset::classes(d),
            _ => None,
        }
    }

    fn token_count(&self) -> Option<usize> {
        match self {
            TrainingData::Text(d) => d.token_count(),
            TrainingData::Tokens(d) => d.token_count(),
            _ => None,
        }
    }

    fn fingerprint(&self) -> Option<u64> {
        match self {
            TrainingData::Synthetic(d) => d.fingerprint(),
            TrainingData::Idx(d) => Dataset::fingerprint(d),
            TrainingData::Text(d) => d.fingerprint(),
            TrainingData::Tokens(d) => d.fingerprint(),
        }
    }

    fn describe(&self) -> String {
        match self {
            TrainingData::Synthetic(d) => d.describe(),
            TrainingData::Idx(d) => Dataset::describe(d),
            TrainingData::Text(d) => d.describe(),
            TrainingData::Tokens(d) => d.describe(),
        }
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        match self {
            TrainingData::Synthetic(d) => d.files(),
            TrainingData::Idx(d) => Dataset::files(d),
            TrainingData::Text(d) => d.files(),
            TrainingData::Tokens(d) => d.files(),
        }
    }
}

/// The command line's sets: the synthetic one, MNIST-format files, or a text's characters.
pub enum TrainingData {
    /// Drawn from the seed, no files (neither `--data`, `--text` nor `--tokens`).
    Synthetic(SyntheticClassification),
    /// MNIST-format files (`--data DIR`).
    Idx(IdxDataset),
    /// A UTF-8 text, character by character (`--text FILE`).
    Text(CharText),
    /// llm.c's token shards (`--tokens PATH`).
    Tokens(TokenShards),
}

impl TrainingData {
    /// Held-out data for this set: the text's validation split, the test files (`t10k-*`) of
    /// the IDX folder this set came from (`idx_dir`), or synthetic samples no training reads.
    pub fn held_out(&self, idx_dir: Option<&std::path::Path>) -> Result<Self> {
        Ok(match (self, idx_dir) {
            (TrainingData::Synthetic(d), _) => TrainingData::Synthetic(d.held_out()),
            (TrainingData::Text(d), _) => TrainingData::Text(d.held_out()?),
            (TrainingData::Idx(d), Some(dir)) => {
                let test = IdxDataset::load_dir(dir, Split::Test, d.classes())?;
                if test.image_shape() != d.image_shape() {
                    let ((rows, cols), (train_rows, train_cols)) = (test.image_shape(), d.image_shape());
                    return Err(Error::Dataset(format!(
                        "{}: images of {rows}x{cols} pixels, the training images ({}) {train_rows}x{train_cols}",
                        test.files()[0].display(),
                        d.files()[0].display()
                    )));
                }
                TrainingData::Idx(test)
            }
            (TrainingData::Idx(_), None) => {
                return Err(Error::Config("held-out IDX data needs the folder the training files came from".into()))
            }
            (TrainingData::Tokens(d), _) => {
                return Err(Error::Config(format!(
                    "held-out tokens are the `val` shards beside {} (`token_shards::locate`)",
                    d.name()
                )))
            }
        })
    }

    /// The training split in `dir`, checked against the model's input and output widths.
    pub fn from_idx_dir(dir: &std::path::Path, features: usize, classes: usize) -> Result<Self> {
        if !dir.is_dir() {
            let what = if dir.exists() { "is not a folder" } else { "no such folder" };
            return Err(Error::Dataset(format!("IDX folder {}: {what}", dir.display())));
        }
        let set = IdxDataset::load_dir(dir, Split::Train, classes)?;
        if set.features() != features {
            return Err(Error::Config(format!(
                "{}: images have {} pixels, the model's first layer takes {features} inputs",
                dir.display(),
                set.features()
            )));
        }
        Ok(TrainingData::Idx(set))
    }
}
