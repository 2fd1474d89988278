//! Initialisations a model asks for beyond each layer's own (`#[init(...)]` on a field or a
//! block), applied to a layer after its `Layer::init`.

use overlap_plan::StdInit;

use super::contract::Layer;
use crate::init::InitRng;

/// `layer` as GPT-2 and nanoGPT initialise their weights (`#[init(std = 0.02)]` on a field or
/// a block): each parameter of two or more dimensions (weights, embedding tables) redrawn from
/// N(0, std²), each bias zeroed, the rest (LayerNorm's gains) kept; drawn from `rng` after the
/// layer's own initialisation, so deterministic as it is.
pub fn init_normal<L: Layer>(layer: L, rng: &mut InitRng, std: f32) -> L {
    init_normal_params(layer, rng, Some(std), &[])
}

/// `init_normal` (when `std` is given), except that the parameters `named` lists, by their index
/// in `Layer::PARAMS`, are drawn from N(0, σ²) with a σ of their own, whatever their shape:
/// nanoGPT's residual projections, `#[init(std = 0.02, ends_with("c_proj.weight", std = ..))]`.
/// Without `std`, the parameters not named keep the layer's own values. Parameters are drawn in
/// their order and a normal draw is a scaled standard one, so the values of one parameter do not
/// depend on the σ of another.
pub fn init_normal_params<L: Layer>(mut layer: L, rng: &mut InitRng, std: Option<f32>, named: &[(usize, f32)]) -> L {
    for (index, param) in L::PARAMS.iter().enumerate() {
        let numel = param.shape.iter().product();
        let own = named.iter().find(|(i, _)| *i == index).map(|&(_, std)| std);
        match (own, std.map(|std| (std, StdInit::of(param.name, param.shape.len())))) {
            (Some(std), _) | (None, Some((std, StdInit::Draw))) => {
                layer.param_mut(index).copy_from_slice(&rng.normal(numel, std))
            }
            (None, Some((_, StdInit::Zero))) => layer.param_mut(index).fill(0.0),
            (None, Some((_, StdInit::Keep)) | None) => {}
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

    #[test]
    fn named_parameters_take_their_own_spread_and_the_others_are_drawn_as_before() {
        let fresh = || CausalSelfAttention::<8, 2>::init(&mut InitRng::for_layer(5, 1));
        let spread = |w: &[f32]| (w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32).sqrt();
        let plain = init_normal(fresh(), &mut InitRng::for_layer(5, 2), 0.02);
        let scaled = init_normal_params(fresh(), &mut InitRng::for_layer(5, 2), Some(0.02), &[(2, 0.002)]);
        assert_eq!(scaled.param(0), plain.param(0), "c_attn.weight, drawn before, unchanged");
        // A normal draw is the standard one scaled: the same stream at a tenth of the spread.
        for (a, b) in scaled.param(2).iter().zip(plain.param(2)) {
            assert!((a * 10.0 - b).abs() <= 1e-6 * b.abs().max(1e-3), "c_proj.weight {a} vs {b}");
        }
        assert!((0.0015..0.0025).contains(&spread(scaled.param(2))), "c_proj.weight's spread");
        assert!(scaled.param(3).iter().all(|&b| b == 0.0), "c_proj.bias zeroed");
        // Without a spread for the rest, only the named parameter changes.
        let own = fresh();
        let only = init_normal_params(fresh(), &mut InitRng::for_layer(5, 2), None, &[(3, 0.5)]);
        assert_eq!((only.param(0), only.param(1), only.param(2)), (own.param(0), own.param(1), own.param(2)));
        assert!((0.3..0.7).contains(&spread(only.param(3))), "a bias named is drawn too");
    }
}
