//! Parameter access shared by the layers whose parameters are `[weight, bias]` (Linear,
//! LayerNorm).

/// Parameter `index` of a layer whose parameters are `[weight, bias]` (Linear, LayerNorm).
pub(super) fn weight_or_bias<T>(layer: &str, index: usize, weight: T, bias: T) -> T {
    match index {
        0 => weight,
        1 => bias,
        _ => panic!("{layer} has 2 parameters (weight, bias); index {index} is out of range"),
    }
}
