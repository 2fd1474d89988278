//! Checks of a safetensors file against what a model expects, reporting every difference at
//! once.

use std::collections::BTreeMap;

use safetensors::tensor::Dtype;
use safetensors::SafeTensors;

use crate::params_file::f32_values;

/// The f32 values of each tensor of `bytes`, by name, if every tensor is in `expected` with the
/// same shape and dtype; otherwise every problem found. `required` names must all be present.
pub fn read_checked(
    bytes: &[u8],
    expected: &BTreeMap<String, Vec<usize>>,
    required: impl Fn(&str) -> bool,
) -> Result<BTreeMap<String, Vec<f32>>, Vec<String>> {
    let file = SafeTensors::deserialize(bytes).map_err(|e| vec![format!("not a valid safetensors file: {e}")])?;
    let mut problems = Vec::new();
    let mut out = BTreeMap::new();
    let mut found = file.tensors();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, view) in found {
        match expected.get(&name) {
            None => problems
                .push(format!("unexpected tensor `{name}` {:?} (the model has no such parameter)", view.shape())),
            Some(shape) if shape.as_slice() != view.shape() => {
                problems.push(format!("`{name}` has shape {:?}, the model expects {shape:?}", view.shape()))
            }
            Some(_) if view.dtype() != Dtype::F32 => {
                problems.push(format!("`{name}` is {:?}, the model expects F32", view.dtype()))
            }
            Some(_) => {
                out.insert(name, f32_values(view.data()));
            }
        }
    }
    let present: Vec<String> = file.names().into_iter().map(str::to_string).collect();
    for (name, shape) in expected {
        if required(name) && !present.contains(name) {
            problems.push(format!("missing tensor `{name}` {shape:?}"));
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}
