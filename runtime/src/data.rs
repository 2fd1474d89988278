//! Training data: the `Dataset` trait the `Trainer` reads batches through, the `Batch` it fills,
//! and the built-in sets. The `Trainer` shards by global sample index, so that the global batch
//! of a step is the same samples whatever the world size, and a resumed run continues where the
//! checkpoint says.
//!
//! The synthetic classification set:
//! Sample `i` is drawn from its own seeded generator: class `i mod classes` shuffled by a hash,
//! features = that class's fixed prototype plus Gaussian-like noise. Learnable, so the loss falls.

use std::path::PathBuf;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};
use crate::idx::IdxDataset;
use crate::layer::StepContext;
use crate::tensor::Matrix;

/// One rank's micro-batch: the inputs, and whichever targets the loss reads: class indices for
/// `CrossEntropyLoss`, a matrix for `MseLoss`. Reused from step to step, so filling it allocates
/// nothing once it has grown to size.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// `[rows, features]`.
    pub inputs: Matrix,
    /// One class index per row (classification).
    pub labels: Vec<usize>,
    /// `[rows, outputs]` (regression).
    pub targets: Matrix,
    /// How the rows group into sequences (set by the `Trainer` from `Dataset::positions`).
    pub context: StepContext,
}

impl Batch {
    /// Samples (or tokens of sequences) in the batch: its inputs' rows.
    pub fn rows(&self) -> usize {
        self.inputs.rows()
    }

    /// After `Dataset::fill`: `samples` samples of `context.positions` rows each, of `features`
    /// columns each, or an error naming what `source` filled instead (a dataset that fills
    /// otherwise would fail deep inside the first layer).
    pub(crate) fn check_filled(&self, source: &str, samples: usize, first: u64, features: usize) -> Result<()> {
        let positions = self.context.row_count() / samples.max(1);
        if self.rows() != self.context.row_count() {
            return Err(Error::Dataset(format!(
                "asked {source} for {samples} samples of {positions} position(s) from index {first}, it filled {} rows",
                self.rows()
            )));
        }
        if self.inputs.cols() != features {
            return Err(Error::Dataset(format!(
                "{source} filled rows of {} columns from index {first}, and says its samples have {features} features \
                 (`Dataset::features`)",
                self.inputs.cols()
            )));
        }
        Ok(())
    }
}

/// `Dataset::describe`'s default: the width alone (`6 features per sample`), which says nothing
/// a message naming the width does not.
pub(crate) fn width_only(features: usize) -> String {
    format!("{features} features per sample")
}

/// Where the `Trainer` reads its samples: by global index, so that each rank reads its own
/// shard of every step and a resumed run reads what an uninterrupted one would have.
#[allow(clippy::len_without_is_empty)] // `len() == Some(0)` is the empty set, which is refused.
pub trait Dataset {
    /// Fills `batch` with the `samples` samples of global indices `first, first + 1, ...` (each
    /// `positions()` rows of inputs: `samples` rows for independent samples); a finite set
    /// wraps around (index modulo its size). The `Trainer` fills each micro-batch
    /// one ahead, while the device runs the one before (a step's last fill comes before its
    /// updates end, and may go unread when the run stops there); its error is raised at the
    /// step that reads the batch. `batch` is reused and holds an earlier batch: set its inputs
    /// and clear its labels (or targets) before pushing this one's, as the built-in sets do.
    fn fill(&mut self, first: u64, samples: usize, batch: &mut Batch) -> Result<()>;

    /// Input features per sample; the `Trainer` checks it against the model's first layer.
    fn features(&self) -> usize;

    /// Rows per sample: 1 for independent samples (the default), a sequence's length for a set
    /// of sequences, whose `fill` then writes `rows × positions` rows, sequence after sequence.
    fn positions(&self) -> usize {
        1
    }

    /// A short description for the start-up line.
    fn describe(&self) -> String {
        width_only(self.features())
    }

    /// How many distinct samples a finite set holds (indices past it wrap around): the
    /// `Trainer` refuses a set of none, and says when a global batch, or a held-out
    /// measurement, reads more samples than it holds. `None` (the default): samples are drawn
    /// or generated without end.
    fn len(&self) -> Option<u64> {
        None
    }

    /// What the token ids of a language model's samples stand for, kept with its checkpoints
    /// and parameters files: a character-level text's sorted characters (token `i` is the
    /// `i`-th). `None` for data that is not token ids (the default).
    fn vocabulary(&self) -> Option<String> {
        None
    }

    /// For samples of token ids, how many ids they may hold (ids `0..n`): the `Trainer` refuses,
    /// before step 1, a model whose token embedding or output has fewer, rather than failing at
    /// the first batch that holds a larger id. `None` (the default): not token ids.
    fn token_count(&self) -> Option<usize> {
        None
    }

    /// For samples labelled with classes, how many classes their labels may name (labels
    /// `0..n`): the `Trainer` refuses, before step 1, a model with fewer outputs, rather than
    /// failing at the first batch that holds a larger label. `None` (the default): not said.
    fn classes(&self) -> Option<usize> {
        None
    }

    /// A hash of the samples themselves (not of where their files lie, which may differ from
    /// node to node), equal on every rank that reads the same data: the ranks compare it
    /// before step 1, since each reads its own copy. `None` (the default): not compared.
    fn fingerprint(&self) -> Option<u64> {
        None
    }

    /// The files the samples are read from: `Trainer::fit` refuses, before step 1, a run whose
    /// outputs (parameters file, trace, timeline, profile) would be written over one. Empty (the
    /// default): data held in memory or read from nowhere the run writes.
    fn files(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

impl Dataset for SyntheticClassification {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> Result<()> {
        SyntheticClassification::fill_into(self, first, rows, &mut batch.inputs, &mut batch.labels);
        Ok(())
    }

    fn features(&self) -> usize {
        self.features
    }

    fn classes(&self) -> Option<usize> {
        Some(self.classes)
    }

    fn fingerprint(&self) -> Option<u64> {
        let mut hash = crate::content_hash::ContentHash::new();
        for n in [self.seed, self.features as u64, self.classes as u64] {
            hash.u64(n);
        }
        Some(hash.finish())
    }

    fn describe(&self) -> String {
        format!(
            "synthetic classification set (seed {}, {} features, {} classes)",
            self.seed, self.features, self.classes
        )
    }
}

impl Dataset for IdxDataset {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> Result<()> {
        IdxDataset::fill_into(self, first, rows, &mut batch.inputs, &mut batch.labels);
        Ok(())
    }

    fn len(&self) -> Option<u64> {
        Some(IdxDataset::len(self) as u64)
    }

    fn features(&self) -> usize {
        IdxDataset::features(self)
    }

    fn classes(&self) -> Option<usize> {
        Some(IdxDataset::classes(self))
    }

    fn fingerprint(&self) -> Option<u64> {
        Some(self.content_hash())
    }

    fn describe(&self) -> String {
        format!("IDX set ({} samples, {} features, {} classes)", self.len(), IdxDataset::features(self), self.classes())
    }

    fn files(&self) -> Vec<PathBuf> {
        IdxDataset::files(self).to_vec()
    }
}

/// Class prototypes are small against the noise, so a run needs many steps to fit the data.
const PROTOTYPE_SCALE: f32 = 0.2;

/// A classification set drawn from a seed: each class a random prototype, each sample its
/// class's prototype plus noise, any number of samples (sample `i` is the same on every rank
/// and every run). For examples and tests without data files.
#[derive(Clone)]
pub struct SyntheticClassification {
    seed: u64,
    features: usize,
    classes: usize,
    prototypes: Vec<f32>,
    /// Added to every index: 0 for training, `HELD_OUT` for the held-out samples.
    first_index: u64,
}

/// Noise words drawn at a time, two per feature: 2 KiB on the stack.
const NOISE_WORDS: usize = 512;

/// A float in [-1, 1) from one word, as rand's `random_range(-1.0f32..1.0)` makes it: the top 23
/// bits as the mantissa of a float in [1, 2), then moved (exactly) to [0, 1) and scaled.
fn uniform(word: u32) -> f32 {
    let one_to_two = f32::from_bits((word >> 9) | 0x3F80_0000);
    (one_to_two - 1.0) * 2.0 + -1.0
}

/// Where the held-out samples' indices start: far past any a training run reads.
const HELD_OUT: u64 = 1 << 62;

impl SyntheticClassification {
    /// Samples of `features` features in `classes` classes, drawn from `seed`.
    ///
    /// # Panics
    ///
    /// If `features` or `classes` is 0, or their product does not fit in memory's indices.
    pub fn new(seed: u64, features: usize, classes: usize) -> Self {
        assert!(
            features > 0 && classes > 0 && features.checked_mul(classes).is_some(),
            "SyntheticClassification::new(seed {seed}, {features} features, {classes} classes): a classification \
             set needs at least one feature and one class"
        );
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let prototypes = (0..features * classes).map(|_| rng.random_range(-PROTOTYPE_SCALE..PROTOTYPE_SCALE)).collect();
        SyntheticClassification { seed, features, classes, prototypes, first_index: 0 }
    }

    /// Samples of the same classes that no training run reads (indices from 2^62 on).
    pub fn held_out(&self) -> Self {
        SyntheticClassification { first_index: HELD_OUT, ..self.clone() }
    }

    /// Features per sample.
    pub fn features(&self) -> usize {
        self.features
    }

    /// Classes the labels range over.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Fills `inputs` (resized to `len x features`) and `labels` with samples `first..first+len`.
    pub fn fill_into(&self, first: u64, len: usize, inputs: &mut Matrix, labels: &mut Vec<usize>) {
        inputs.resize(len, self.features);
        labels.clear();
        for r in 0..len {
            let index = self.first_index.wrapping_add(first + r as u64);
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
            rng.set_stream(index + 1);
            let label = rng.random_range(0..self.classes);
            let prototype = &self.prototypes[label * self.features..(label + 1) * self.features];
            // The noise, the sum of two uniforms in [-1, 1) per feature (cheap, bounded, roughly
            // bell-shaped), is drawn in bulk: the same floats as a `random_range(-1.0f32..1.0)`
            // call per uniform, in half to two thirds of the time (measured at 64 and 512 samples
            // of 784 features; what is left is the generator's own). The host fills the next batch
            // while a GPU works, and a GPU step waits for it when it takes longer.
            let mut words = [0u32; NOISE_WORDS];
            let row = inputs.row_mut(r);
            for (xs, ps) in row.chunks_mut(NOISE_WORDS / 2).zip(prototype.chunks(NOISE_WORDS / 2)) {
                let words = &mut words[..2 * xs.len()];
                rng.fill(words);
                for ((x, &p), pair) in xs.iter_mut().zip(ps).zip(words.chunks_exact(2)) {
                    *x = p + (uniform(pair[0]) + uniform(pair[1]));
                }
            }
            labels.push(label);
        }
    }
}

/// Index of the first sample of `rank`'s share of micro-batch `micro` of step `step`: every step
/// consumes `accumulate x world x batch` consecutive samples, ranks take consecutive slices.
pub fn shard_start(step: u64, micro: usize, accumulate: usize, world: usize, rank: usize, batch: usize) -> u64 {
    shard_start_after(step * (accumulate * world * batch) as u64, micro, world, rank, batch)
}

/// The same, for a step that starts after `samples_seen` samples (a resumed run may have changed
/// the world size or batch since).
pub fn shard_start_after(samples_seen: u64, micro: usize, world: usize, rank: usize, batch: usize) -> u64 {
    samples_seen + ((micro * world + rank) * batch) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_depend_only_on_their_index() {
        let data = SyntheticClassification::new(7, 5, 3);
        let (mut a, mut la, mut b, mut lb) = (Matrix::default(), vec![], Matrix::default(), vec![]);
        data.fill_into(10, 4, &mut a, &mut la);
        data.fill_into(12, 1, &mut b, &mut lb);
        assert_eq!(a.row(2), b.row(0));
        assert_eq!(la[2], lb[0]);
        assert!(la.iter().all(|&l| l < 3));
    }

    /// The samples as one `random_range` call per uniform drew them, before the bulk draw.
    fn drawn_one_by_one(data: &SyntheticClassification, index: u64) -> (Vec<f32>, usize) {
        let mut rng = ChaCha8Rng::seed_from_u64(data.seed);
        rng.set_stream(data.first_index.wrapping_add(index) + 1);
        let label = rng.random_range(0..data.classes);
        let prototype = &data.prototypes[label * data.features..(label + 1) * data.features];
        let row = prototype
            .iter()
            .map(|&p| {
                let noise: f32 = rng.random_range(-1.0f32..1.0) + rng.random_range(-1.0f32..1.0);
                p + noise
            })
            .collect();
        (row, label)
    }

    #[test]
    fn bulk_noise_is_the_noise_drawn_one_by_one() {
        for (seed, features) in [(0, 1), (3, 5), (7, 255), (7, 256), (7, 257), (11, 784), (2, 1000)] {
            let data = SyntheticClassification::new(seed, features, 10);
            for set in [data.clone(), data.held_out()] {
                let (mut inputs, mut labels) = (Matrix::default(), vec![]);
                let first = 1 << 40;
                set.fill_into(first, 6, &mut inputs, &mut labels);
                for (r, &got) in labels.iter().enumerate() {
                    let (row, label) = drawn_one_by_one(&set, first + r as u64);
                    assert_eq!(got, label, "seed {seed}, {features} features, sample {r}");
                    let same = inputs.row(r).iter().zip(&row).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "seed {seed}, {features} features, sample {r}: the noise differs");
                }
            }
        }
    }

    #[test]
    fn shards_tile_the_global_batch_for_any_world_size() {
        // 2 ranks x batch 3 cover the same samples as 1 rank x batch 6 and 3 ranks x batch 2.
        let one: Vec<u64> = (0..6).map(|i| shard_start(5, 0, 1, 1, 0, 6) + i).collect();
        let two: Vec<u64> = (0..2).flat_map(|r| (0..3).map(move |i| shard_start(5, 0, 1, 2, r, 3) + i)).collect();
        let three: Vec<u64> = (0..3).flat_map(|r| (0..2).map(move |i| shard_start(5, 0, 1, 3, r, 2) + i)).collect();
        assert_eq!(one, two);
        assert_eq!(one, three);
        // 4 micro-steps of 2 == one step of 8.
        let micro: Vec<u64> = (0..4).flat_map(|m| (0..2).map(move |i| shard_start(1, m, 4, 1, 0, 2) + i)).collect();
        let whole: Vec<u64> = (0..8).map(|i| shard_start(1, 0, 1, 1, 0, 8) + i).collect();
        assert_eq!(micro, whole);
    }
}
