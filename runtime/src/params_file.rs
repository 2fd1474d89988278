//! Parameters to and from safetensors files, with PyTorch's `state_dict` names and layouts, so
//! `safetensors.torch.load_file` reads them directly.

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

use crate::error::{Error, Result};
use crate::model::DistributedModel;

/// Writes every parameter of `model` to `path` as little-endian f32 tensors.
pub fn save_params<M: DistributedModel>(model: &M, path: &Path) -> Result<()> {
    let schedule = M::SCHEDULE;
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = schedule
        .params()
        .map(|p| {
            let data: Vec<u8> = model.param(p).iter().flat_map(|v| v.to_le_bytes()).collect();
            (schedule.param_name(p), schedule.param(p).shape.to_vec(), data)
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(name, shape, data)| {
            TensorView::new(Dtype::F32, shape.clone(), data)
                .map(|v| (name.as_str(), v))
                .map_err(|e| Error::Safetensors(e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize_to_file(views, None::<HashMap<String, String>>, path)
        .map_err(|e| Error::Safetensors(format!("{}: {e}", path.display())))
}

/// One named tensor read back from a file: `(name, shape, values)`.
pub type NamedTensor = (String, Vec<usize>, Vec<f32>);

/// Reads a parameter file written by `save_params`, in file order.
pub fn load_params(path: &Path) -> Result<Vec<NamedTensor>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.to_owned(), source })?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| Error::Safetensors(format!("{}: {e}", path.display())))?;
    let mut out = Vec::new();
    for (name, view) in file.iter() {
        if view.dtype() != Dtype::F32 {
            return Err(Error::Safetensors(format!(
                "{}: tensor {name} is {:?}, expected F32",
                path.display(),
                view.dtype()
            )));
        }
        let values = view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        out.push((name.to_string(), view.shape().to_vec(), values));
    }
    Ok(out)
}
