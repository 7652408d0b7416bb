//! ONNX front door for kiln: the ONNX protobuf schema ([`proto`]) and a
//! zero-copy model loader ([`load`]).
//!
//! [`load::OnnxFile::from_path`] memory-maps a `.onnx` file and decodes it
//! with prost straight from the mapping, so tensor `raw_data` (and external
//! data files, also mapped) are slices of the mapping rather than copies.
//! [`import::import`] turns the model into verified tensor IR.
#![deny(missing_docs)]

pub mod import;
pub mod load;
pub mod proto;
