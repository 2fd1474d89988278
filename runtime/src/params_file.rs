//! Parameters to and from safetensors files, with PyTorch's `state_dict` names and layouts, so
//! `safetensors.torch.load_file` reads them directly.

use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

use crate::error::{Error, Result};
use crate::model::DistributedModel;

/// `(name, shape, little-endian f32 bytes)`: a tensor ready to be written.
pub(crate) type Tensor = (String, Vec<usize>, Vec<u8>);

pub(crate) fn to_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The inverse of `to_bytes`.
pub(crate) fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// Every parameter of `model`, under its PyTorch name and shape.
pub(crate) fn model_tensors<M: DistributedModel>(model: &M) -> Vec<Tensor> {
    let s = M::SCHEDULE;
    s.params().map(|p| (s.param_name(p), s.param(p).shape.to_vec(), to_bytes(model.param(p)))).collect()
}

/// A safetensors file holding `tensors`, as bytes.
pub(crate) fn serialize(tensors: &[Tensor]) -> std::result::Result<Vec<u8>, String> {
    let views = tensors
        .iter()
        .map(|(name, shape, data)| {
            TensorView::new(Dtype::F32, shape.clone(), data).map(|v| (name.as_str(), v)).map_err(|e| e.to_string())
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    safetensors::serialize(views, None).map_err(|e| e.to_string())
}

/// Writes every parameter of `model` to `path` as little-endian f32 tensors.
pub fn save_params<M: DistributedModel>(model: &M, path: &Path) -> Result<()> {
    let bytes = serialize(&model_tensors(model)).map_err(|e| Error::Safetensors(format!("{}: {e}", path.display())))?;
    std::fs::write(path, bytes).map_err(|source| Error::Io { path: path.to_path_buf(), source })
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
        out.push((name.to_string(), view.shape().to_vec(), f32_values(view.data())));
    }
    Ok(out)
}
