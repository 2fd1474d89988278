//! A parameters file's bytes, from a file or from a pipe (`--init-params <(zcat model.gz)`). A
//! pipe is read no further than its safetensors header says the file goes, so that one which
//! never ends (`<(cat /dev/zero)`) is refused at its header instead of filling memory.

use std::io::Read;
use std::path::Path;

use safetensors::tensor::Metadata;

use super::shapes::MAX_HEADER_BYTES;
use crate::error::{Error, Result};
use crate::process::input_files::read_unless_device;

/// A parameters file's bytes: a file's whole, a pipe's as far as its header says; a device is
/// refused.
pub(super) fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let metadata = std::fs::metadata(path).map_err(io)?;
    if metadata.is_file() {
        return std::fs::read(path).map_err(io);
    }
    if std::os::unix::fs::FileTypeExt::is_fifo(&metadata.file_type()) {
        return read_stream(path, std::fs::File::open(path).map_err(io)?);
    }
    read_unless_device(path) // Refuses a device by name.
}

/// The 8-byte header length, the header, then as many bytes as the header's tensors take, and
/// one more if there is one (which `SafeTensors::deserialize` then refuses as trailing bytes). What
/// cannot be a header (a `torch.save` zip, a pickle, zeros) stops the reading there: the parse of
/// what was read says what the stream is instead.
fn read_stream(path: &Path, from: impl Read) -> Result<Vec<u8>> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let mut from = from;
    let mut bytes = Vec::new();
    (&mut from).take(8).read_to_end(&mut bytes).map_err(io)?;
    let Ok(length) = <[u8; 8]>::try_from(&bytes[..]) else { return Ok(bytes) };
    let header = u64::from_le_bytes(length);
    if header > MAX_HEADER_BYTES {
        return Ok(bytes);
    }
    (&mut from).take(header).read_to_end(&mut bytes).map_err(io)?;
    let Ok(metadata) = serde_json::from_slice::<Metadata>(&bytes[8..]) else { return Ok(bytes) };
    from.take(metadata.data_len() as u64 + 1).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_bytes() -> Vec<u8> {
        let values = [1.0f32, 2.0, 3.0];
        let tensor = crate::tensor_file::Tensor::new("w".into(), vec![3], &values[..]);
        let mut bytes = Vec::new();
        crate::tensor_file::write(&mut bytes, &[tensor], None).unwrap();
        bytes
    }

    #[test]
    fn a_stream_is_read_as_far_as_its_header_says_and_one_byte_more() {
        let whole = file_bytes();
        let path = Path::new("pipe");
        assert_eq!(read_stream(path, &whole[..]).unwrap(), whole);
        let longer = [&whole[..], b"trailing"].concat();
        assert_eq!(read_stream(path, &longer[..]).unwrap(), longer[..whole.len() + 1]);
        assert_eq!(read_stream(path, &whole[..5]).unwrap(), whole[..5], "short: what there is");
    }

    #[test]
    fn an_endless_stream_stops_at_its_header() {
        let zeros = std::io::repeat(0);
        assert_eq!(read_stream(Path::new("zeros"), zeros).unwrap(), [0; 8], "a header of 0 bytes");
        let endless = std::io::repeat(0xff);
        assert_eq!(read_stream(Path::new("ones"), endless).unwrap(), [0xff; 8], "no header is that long");
    }
}
