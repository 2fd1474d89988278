//! A parameters file's tensor names and shapes from its header alone: what tells which compiled
//! shape a file is for, without reading its values (43 MB for the baby GPT) before the run that
//! loads them reads them again.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use safetensors::tensor::{Dtype, Metadata};

use crate::error::{Error, Result};

/// The safetensors format's bound on a header (its crate refuses longer ones).
const MAX_HEADER_BYTES: u64 = 100_000_000;

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
        if info.dtype != Dtype::F32 {
            return Err(Error::Safetensors(format!(
                "{}: tensor {name} is {:?}, expected F32",
                path.display(),
                info.dtype
            )));
        }
        shapes.push((name, info.shape.clone()));
    }
    shapes.sort();
    Ok(shapes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params_file::load_params;
    use crate::tensor_file::{self, Tensor};

    fn write(path: &Path, tensors: &[(&str, Vec<usize>)]) {
        let owned: Vec<Tensor> = tensors
            .iter()
            .map(|(name, shape)| Tensor::new(name.to_string(), shape.clone(), vec![0.5; shape.iter().product()]))
            .collect();
        tensor_file::write(&mut File::create(path).unwrap(), &owned, None).unwrap();
    }

    #[test]
    fn the_header_gives_what_a_whole_read_gives() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.safetensors");
        write(&path, &[("h.0.attn.c_attn.weight", vec![12, 4]), ("wte.weight", vec![65, 4]), ("ln_f.bias", vec![4])]);
        let whole: Vec<(String, Vec<usize>)> =
            load_params(&path).unwrap().into_iter().map(|(name, shape, _)| (name, shape)).collect();
        assert_eq!(param_shapes(&path).unwrap(), whole);
        assert_eq!(whole[0].0, "h.0.attn.c_attn.weight");
    }

    #[test]
    fn a_file_cut_short_or_not_safetensors_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.safetensors");
        write(&path, &[("w", vec![3, 4])]);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        let cut = param_shapes(&path).unwrap_err().to_string();
        assert!(cut.contains("its header describes"), "{cut}");
        assert!(load_params(&path).is_err());
        std::fs::write(&path, b"PK\x03\x04 a zip archive, not a parameters file").unwrap();
        assert!(param_shapes(&path).is_err());
        std::fs::write(&path, b"1234").unwrap();
        assert!(param_shapes(&path).unwrap_err().to_string().contains("8-byte"));
    }
}
