//! A parameters file's tensor names and shapes from its header alone: what tells which compiled
//! shape a file is for, without reading its values (43 MB for the baby GPT) before the run that
//! loads them reads them again.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use safetensors::tensor::{Dtype, Metadata};

use crate::error::{Error, Result};

/// The safetensors format's bound on a header (its crate refuses longer ones).
pub(super) const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Tensor `name` of `path` holds `dtype`: anything but `F32` is refused, naming it, as every
/// reader of a parameters file here refuses it.
pub(super) fn require_f32(path: &Path, name: &str, dtype: Dtype) -> Result<()> {
    match dtype {
        Dtype::F32 => Ok(()),
        other => Err(Error::Safetensors(format!("{}: tensor {name} is {other:?}, expected F32", path.display()))),
    }
}

/// The name and shape of every tensor `path` holds, sorted by name, read from the file's header.
/// The file must be whole (its length the one its header describes) and every tensor `F32`, as
/// `load_params` requires; on any other file this says why, as `load_params` would (in its
/// words or shorter).
pub fn param_shapes(path: &Path) -> Result<Vec<(String, Vec<usize>)>> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let refused = |why: String| Error::Safetensors(format!("{}: not a safetensors file ({why})", path.display()));
    let mut file = File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes).map_err(|_| refused("shorter than its 8-byte header length".into()))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER_BYTES || 8 + header_len > file_len {
        return Err(refused(format!("a header of {header_len} bytes in a file of {file_len}")));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(io)?;
    let metadata: Metadata = serde_json::from_slice(&header).map_err(|e| refused(format!("its header: {e}")))?;
    let described = 8 + header_len + metadata.data_len() as u64;
    if described != file_len {
        return Err(refused(format!("the file is {file_len} bytes, its header describes {described}")));
    }
    let mut shapes = Vec::new();
    for (name, info) in metadata.tensors() {
        require_f32(path, &name, info.dtype)?;
        shapes.push((name, info.shape.clone()));
    }
    shapes.sort();
    Ok(shapes)
}
