//! Losses: value and gradient with respect to the model output in one pass.
