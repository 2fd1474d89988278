//! Deterministic parameter initialisation. Every rank initialises from the same seed, and rank
//! 0's values are broadcast anyway, so results never depend on the world size.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

/// Seeded generator for initial parameter values (ChaCha8: reproducible across platforms and
/// `rand` versions).
pub struct InitRng(ChaCha8Rng);

impl InitRng {
    /// A generator seeded with `seed` alone (a model's layers take `for_layer` instead).
    pub fn new(seed: u64) -> Self {
        InitRng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A generator for layer number `layer` of a model seeded with `seed`, so that each layer's
    /// values do not depend on the layers before it.
    pub fn for_layer(seed: u64, layer: usize) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(layer as u64 + 1);
        InitRng(rng)
    }

    /// `n` values drawn from U(-bound, bound), PyTorch's `nn.Linear` default with
    /// `bound = 1/sqrt(fan_in)`.
    pub fn uniform(&mut self, n: usize, bound: f32) -> Vec<f32> {
        let mut values = crate::host::huge_pages::with_capacity(n);
        values.extend((0..n).map(|_| self.0.random_range(-bound..=bound)));
        values
    }

    /// `n` values drawn from N(0, std²): PyTorch's `nn.Embedding` default with `std = 1`,
    /// GPT-2's initialisation with `std = 0.02`.
    pub fn normal(&mut self, n: usize, std: f32) -> Vec<f32> {
        let normal = Normal::new(0.0f32, std).expect("a finite, non-negative standard deviation");
        let mut values = crate::host::huge_pages::with_capacity(n);
        values.extend((0..n).map(|_| normal.sample(&mut self.0)));
        values
    }
}
