//! How many layers one model may have, blocks unrolled, and the error past it: read by the
//! struct form (`ast`) and the module form (`nesting`) alike.

use syn::Type;

use crate::errors::Errors;

/// Layers of one model, blocks unrolled, at most: arrays of arrays multiply (three nested
/// `[_; 1024]` would be a billion layers), and each layer is a few lines of generated code that
/// the compiler checks: 2048 layers take half a minute, 8192 several (a 96-block transformer
/// has about 600).
pub const MAX_LAYERS: usize = 2048;

/// Reports the layer that takes a model past `MAX_LAYERS`, when written as a field of its own
/// (one unrolled from a block is reported at the model's field holding the block).
pub fn past_max_layers(layers: usize, at: &Type, errors: &mut Errors) -> bool {
    let past = layers > MAX_LAYERS;
    if past {
        errors.spanned(
            at,
            format!("this layer takes the model past {MAX_LAYERS} layers (blocks unrolled): use fewer layers"),
        );
    }
    past
}
