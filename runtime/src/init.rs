//! Deterministic parameter initialisation. Every rank initialises from the same seed, and rank
//! 0's values are broadcast anyway, so results never depend on the world size.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

/// Seeded generator for initial parameter values (ChaCha8: reproducible across platforms and
/// `rand` versions).
pub struct InitRng(ChaCha8Rng);

impl InitRng {
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

/// `layer` as GPT-2 and nanoGPT initialise their weights (`#[init(std = 0.02)]` on a field or
/// a block): each parameter of two or more dimensions (weights, embedding tables) redrawn from
/// N(0, std²), each bias zeroed, the rest (LayerNorm's gains) kept; drawn from `rng` after the
/// layer's own initialisation, so deterministic as it is.
pub fn init_normal<L: crate::layer::Layer>(mut layer: L, rng: &mut InitRng, std: f32) -> L {
    for (index, param) in L::PARAMS.iter().enumerate() {
        if param.shape.len() >= 2 {
            let numel = param.shape.iter().product();
            layer.param_mut(index).copy_from_slice(&rng.normal(numel, std));
        } else if param.name == "bias" || param.name.ends_with(".bias") {
            layer.param_mut(index).fill(0.0);
        }
    }
    layer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::{CausalSelfAttention, Layer, LayerNorm};

    #[test]
    fn init_normal_redraws_matrices_zeroes_biases_and_keeps_gains() {
        let mut rng = InitRng::for_layer(3, 1);
        let attn = init_normal(CausalSelfAttention::<8, 2>::init(&mut rng), &mut rng, 0.02);
        let w = attn.param(0);
        let std = (w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32).sqrt();
        assert!((0.015..0.025).contains(&std), "c_attn.weight's spread {std}");
        assert!(attn.param(1).iter().chain(attn.param(3)).all(|&b| b == 0.0), "biases zeroed");
        let mut rng = InitRng::for_layer(3, 2);
        let norm = init_normal(LayerNorm::<4>::init(&mut rng), &mut rng, 0.02);
        assert_eq!((norm.param(0), norm.param(1)), (&[1.0; 4][..], &[0.0; 4][..]), "gains and biases as PyTorch's");
    }
}
