//! Parameter access shared by the layers whose parameters are `[weight, bias]` (Linear,
//! LayerNorm).

/// Panics unless the layer holds all its parameters (`holds_all`): a lent one is empty.
pub(super) fn assert_not_lent(layer: &str, holds_all: bool) {
    assert!(
        holds_all,
        "{layer}: its parameters are lent to an all-reduce that updates them; call `step` before the next `forward`"
    );
}

/// Parameter `index` of a layer whose parameters are `[weight, bias]` (Linear, LayerNorm).
pub(super) fn weight_or_bias<T>(layer: &str, index: usize, weight: T, bias: T) -> T {
    match index {
        0 => weight,
        1 => bias,
        _ => panic!("{layer} has 2 parameters (weight, bias); index {index} is out of range"),
    }
}
