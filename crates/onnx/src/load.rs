//! Zero-copy loading of ONNX models and resolution of tensor data.
//!
//! [`OnnxFile::from_path`] memory-maps the model read-only and decodes the
//! [`ModelProto`] from a [`Bytes`] that owns the mapping. Because every
//! protobuf `bytes` field is generated as [`Bytes`], each tensor's `raw_data`
//! is a slice of the mapping, never a copy. [`OnnxFile::tensor_data`] turns any
//! tensor (raw, typed fields, or external file) into the raw ONNX byte layout,
//! mapping external data files once each.
//!
//! Memory-mapped files must not be modified or truncated by another process
//! while an [`OnnxFile`] (or any `Bytes` obtained from it) is alive.

mod external;
mod locate;
mod tensor_data;

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use kiln_tir::mapped::Region;
use prost::Message;

use crate::proto::{ModelProto, TensorProto};

/// A decoded ONNX model together with the buffer it was decoded from.
///
/// The buffer (usually a read-only memory mapping of the file) stays alive as
/// long as the `OnnxFile` or any `Bytes` sliced from it, so `raw_data` fields of
/// [`OnnxFile::model`] and the results of [`OnnxFile::tensor_data`] stay valid.
pub struct OnnxFile {
    /// The decoded model; its `bytes` fields are slices of the source buffer.
    pub model: ModelProto,
    path: Option<PathBuf>,
    base_dir: Option<PathBuf>,
    bytes: Bytes,
    external: external::ExternalFiles,
}

/// The elements of a tensor, as returned by [`OnnxFile::tensor_data`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensorData {
    /// Elements in ONNX's `raw_data` layout: row-major, fixed-width
    /// little-endian; bool one byte per element; float16/bfloat16/float8 as
    /// their bit patterns; 4-bit types two per byte (first element in the low
    /// nibble); 2-bit types four per byte (first element in the low bits);
    /// 6-bit floats as an LSB-first bit stream; complex types as (real,
    /// imaginary) pairs. A slice of the model or external file when the data
    /// was stored that way, otherwise a small converted copy.
    Raw(Bytes),
    /// The elements of a STRING tensor, one (zero-copy) byte string each.
    Strings(Vec<Bytes>),
}

/// Errors from loading a model or resolving tensor data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The model file could not be opened, inspected or mapped.
    #[error("cannot read ONNX model {}: {error}", .path.display())]
    Io {
        /// The model file.
        path: PathBuf,
        /// The underlying I/O error (shown in the message, so not a `source`).
        error: io::Error,
    },
    /// The bytes are not a valid `ModelProto` (truncated, corrupted, too deeply nested...).
    #[error("cannot decode ONNX model {}: {message}", origin(.path.as_deref()))]
    Decode {
        /// The model file, or `None` when decoding from memory.
        path: Option<PathBuf>,
        /// prost's description of the problem.
        message: String,
    },
    /// A tensor's external data could not be located, opened or sliced.
    #[error("external data of tensor '{tensor}': {reason}")]
    ExternalData {
        /// Name of the tensor.
        tensor: String,
        /// What went wrong.
        reason: String,
    },
    /// A tensor's data is malformed (wrong size, bad shape, unknown type...).
    #[error("data of tensor '{tensor}': {reason}")]
    TensorData {
        /// Name of the tensor.
        tensor: String,
        /// What went wrong.
        reason: String,
    },
}

fn origin(path: Option<&Path>) -> String {
    match path {
        Some(p) => format!("'{}'", p.display()),
        None => "(in-memory buffer)".to_string(),
    }
}

impl OnnxFile {
    /// Memory-maps the model file at `path` (read-only) and decodes it without
    /// copying tensor bytes. External data is resolved relative to the file's
    /// directory.
    pub fn from_path(path: impl AsRef<Path>) -> Result<OnnxFile, LoadError> {
        let path = path.as_ref();
        let bytes = map_file(path).map_err(|error| LoadError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        let base_dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Self::decode(bytes, Some(path.to_path_buf()), Some(base_dir))
    }

    /// Decodes a model held in memory. `raw_data` fields become slices of
    /// `bytes`. Tensors with external data cannot be resolved (there is no
    /// base directory); see [`OnnxFile::from_bytes_with_base_dir`].
    pub fn from_bytes(bytes: Bytes) -> Result<OnnxFile, LoadError> {
        Self::decode(bytes, None, None)
    }

    /// Decodes a model held in memory, resolving external data relative to
    /// `base_dir`.
    pub fn from_bytes_with_base_dir(
        bytes: Bytes,
        base_dir: impl Into<PathBuf>,
    ) -> Result<OnnxFile, LoadError> {
        Self::decode(bytes, None, Some(base_dir.into()))
    }

    fn decode(
        bytes: Bytes,
        path: Option<PathBuf>,
        base_dir: Option<PathBuf>,
    ) -> Result<OnnxFile, LoadError> {
        // Decoding from a `Bytes` makes prost slice (not copy) every `bytes` field.
        let model = ModelProto::decode(bytes.clone()).map_err(|e| LoadError::Decode {
            path: path.clone(),
            message: locate::locate(&bytes).unwrap_or_else(|| shorten_decode_error(&e.to_string())),
        })?;
        Ok(OnnxFile {
            model,
            path,
            base_dir,
            bytes,
            external: external::ExternalFiles::default(),
        })
    }

    /// The model file this was loaded from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The directory external data locations are resolved against, if any.
    pub fn base_dir(&self) -> Option<&Path> {
        self.base_dir.as_deref()
    }

    /// The whole source buffer the model was decoded from (the file mapping
    /// for [`OnnxFile::from_path`]).
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Returns the elements of `tensor` (any tensor of this model, e.g. an
    /// initializer or a Constant attribute) in the raw ONNX layout described
    /// at [`TensorData::Raw`], or as strings for STRING tensors.
    ///
    /// `raw_data` and external data are returned without copying; typed
    /// fields (`float_data`, `int32_data`, ...) are converted. The byte count
    /// is checked against the data type and shape.
    pub fn tensor_data(&self, tensor: &TensorProto) -> Result<TensorData, LoadError> {
        tensor_data::resolve(self, tensor)
    }
}

impl fmt::Debug for OnnxFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnnxFile")
            .field("path", &self.path)
            .field("base_dir", &self.base_dir)
            .field("len", &self.bytes.len())
            .field("ir_version", &self.model.ir_version)
            .field("producer_name", &self.model.producer_name)
            .finish_non_exhaustive()
    }
}

/// Maps a regular file read-only into a `Bytes` that owns the mapping.
/// Reads a whole file, refusing anything but a regular file (a FIFO or a device would block or
/// never end) before opening it.
pub fn read_regular_file(path: &Path) -> io::Result<Vec<u8>> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    std::fs::read(path)
}

fn map_file(path: &Path) -> io::Result<Bytes> {
    // Checked before opening: opening a FIFO or a device can block for ever.
    if !std::fs::metadata(path)?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if meta.len() == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the mapping is read-only and private to this process; like any
    // mmap-based loader we require that the file is not modified or truncated
    // while mapped (documented on the module).
    let mmap = unsafe { memmap2::Mmap::map(&file)? };
    let region: Arc<dyn Region> = Arc::new(MappedFile(mmap));
    kiln_tir::mapped::register(&region);
    Ok(Bytes::from_owner(Mapped(region)))
}

/// A mapped model file, whose pages stages give back once they have read weights into copies
/// of their own (`kiln_tir::mapped`).
struct MappedFile(memmap2::Mmap);

impl Region for MappedFile {
    fn bytes(&self) -> &[u8] {
        &self.0
    }

    fn release(&self, offset: usize, len: usize) {
        // SAFETY: the mapping is private and read-only: dropping its pages loses nothing, a
        // later read faults them in again from the file. An error leaves them resident.
        let _ = unsafe { self.0.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) };
    }
}

/// The owner of a mapped file's [`Bytes`].
struct Mapped(Arc<dyn Region>);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// prost's message, `failed to decode Protobuf message: Inner.f: ...: Outer.g: what`, as
/// `what (in Outer.g > ... > Inner.f)` with a path of more than six fields cut in the middle (a
/// hostile model nests a hundred levels deep).
fn shorten_decode_error(message: &str) -> String {
    let body = message.strip_prefix("failed to decode Protobuf message: ").unwrap_or(message);
    let mut parts: Vec<&str> = body.split(": ").collect();
    let Some(what) = parts.pop() else { return message.to_string() };
    parts.reverse();
    let path = parts;
    let path = if path.len() > 6 {
        format!("{} > … ({} more) > {}", path[..2].join(" > "), path.len() - 5, path[path.len() - 3..].join(" > "))
    } else {
        path.join(" > ")
    };
    let what = kiln_tir::echo::text(what);
    if path.is_empty() { what.into_owned() } else { format!("{what} (in {path})") }
}

/// Display name of a tensor for error messages.
fn tensor_name(t: &TensorProto) -> String {
    match t.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => "<unnamed>".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Released pages of a mapped file read back as the file's bytes; releasing heap bytes
    /// (outside every mapping) leaves them as they were.
    #[test]
    fn released_pages_read_back_unchanged() {
        let path = std::env::temp_dir().join(format!("kiln-mapped-{}.bin", std::process::id()));
        let content: Vec<u8> = (0..5 * 4096 + 123).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let mapped = map_file(&path).unwrap();
        assert_eq!(&mapped[..], &content[..]);
        for range in [100..3 * 4096 + 5, 0..mapped.len(), 4096..8192] {
            kiln_tir::mapped::release(&mapped[range]);
            assert_eq!(&mapped[..], &content[..]);
        }
        let heap = Bytes::from(content.clone());
        kiln_tir::mapped::release(&heap);
        assert_eq!(&heap[..], &content[..]);
        drop(mapped);
        std::fs::remove_file(&path).unwrap();
    }
}
