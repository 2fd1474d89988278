//! A file's shapes from its header against a whole read of it.

use std::fs::File;
use std::path::Path;

use super::{load_params, param_shapes};
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
