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

#[test]
fn a_header_length_starting_with_0x80_is_no_pickle_and_a_pickle_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.safetensors");
    // A 128-byte header (its length's first byte 0x80) whose two tensors overlap.
    let mut header = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#.to_string();
    header.push_str(&" ".repeat(128 - header.len()));
    let mut bytes = 128u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&[0; 4]);
    std::fs::write(&path, &bytes).unwrap();
    let refused = load_params(&path).unwrap_err().to_string();
    assert!(refused.contains("not a safetensors file") && !refused.contains("torch.save"), "{refused}");
    // `torch.save`'s pickles before PyTorch 1.6: the PROTO opcode, protocol 2.
    std::fs::write(&path, b"\x80\x02\x8a\x0alots of pickled tensors").unwrap();
    assert!(load_params(&path).unwrap_err().to_string().contains("looks like a `torch.save` file"));
}
