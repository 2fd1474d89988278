//! Initialisations a model asks for beyond each layer's own (`#[init(...)]` on a field or a
//! block), applied to a layer after its `Layer::init`.

use super::contract::Layer;
use crate::init::InitRng;

/// `layer` as GPT-2 and nanoGPT initialise their weights (`#[init(std = 0.02)]` on a field or
/// a block): each parameter of two or more dimensions (weights, embedding tables) redrawn from
/// N(0, std²), each bias zeroed, the rest (LayerNorm's gains) kept; drawn from `rng` after the
/// layer's own initialisation, so deterministic as it is.
pub fn init_normal<L: Layer>(mut layer: L, rng: &mut InitRng, std: f32) -> L {
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
    use crate::layer::attention::CausalSelfAttention;
    use crate::layer::layer_norm::LayerNorm;

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
