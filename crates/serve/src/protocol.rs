//! The Open Inference Protocol V2 (KServe V2) REST messages, as JSON.
//!
//! A request or response with the binary-data extension is this JSON followed by the tensors'
//! bytes; the `Inference-Header-Content-Length` header gives the JSON's length.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use kiln::DType;

/// The header that splits a body into its JSON and its binary tensors.
pub const HEADER_LENGTH: &str = "inference-header-content-length";

/// `POST /v2/models/{name}/infer`.
#[derive(Debug, Deserialize)]
pub struct InferRequest {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub parameters: Map<String, Value>,
    pub inputs: Vec<RequestInput>,
    #[serde(default)]
    pub outputs: Option<Vec<RequestOutput>>,
}

/// One input tensor of a request.
#[derive(Debug, Deserialize)]
pub struct RequestInput {
    pub name: String,
    pub shape: Vec<i64>,
    pub datatype: String,
    #[serde(default)]
    pub parameters: Map<String, Value>,
    /// Row-major elements, flat or nested; absent when the bytes follow the JSON.
    #[serde(default)]
    pub data: Option<Value>,
}

/// An output the request asks for.
#[derive(Debug, Deserialize)]
pub struct RequestOutput {
    pub name: String,
    #[serde(default)]
    pub parameters: Map<String, Value>,
}

/// The answer to an inference request.
#[derive(Debug, Serialize)]
pub struct InferResponse {
    pub model_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub outputs: Vec<ResponseOutput>,
}

/// One output tensor of a response: its elements in `data`, or `binary_data_size` bytes after
/// the JSON.
#[derive(Debug, Serialize)]
pub struct ResponseOutput {
    pub name: String,
    pub datatype: &'static str,
    pub shape: Vec<u64>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub parameters: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// `GET /v2/models/{name}`.
#[derive(Debug, Serialize)]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: &'static str,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

/// An input's or output's name, datatype and shape; a symbolic dim is -1.
#[derive(Debug, Serialize)]
pub struct TensorMetadata {
    pub name: String,
    pub datatype: &'static str,
    pub shape: Vec<i64>,
}

/// `GET /v2`.
#[derive(Debug, Serialize)]
pub struct ServerMetadata {
    pub name: &'static str,
    pub version: &'static str,
    pub extensions: Vec<&'static str>,
}

/// The protocol's name for a kiln element type, if it has one.
pub fn datatype(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Bool => "BOOL",
        DType::U8 => "UINT8",
        DType::U16 => "UINT16",
        DType::U32 => "UINT32",
        DType::U64 => "UINT64",
        DType::I8 => "INT8",
        DType::I16 => "INT16",
        DType::I32 => "INT32",
        DType::I64 => "INT64",
        DType::F16 => "FP16",
        DType::BF16 => "BF16",
        DType::F32 => "FP32",
        DType::F64 => "FP64",
        DType::String => "BYTES",
        _ => return None,
    })
}

/// A boolean request parameter: absent is false.
pub fn flag(parameters: &Map<String, Value>, key: &str) -> bool {
    parameters.get(key).and_then(Value::as_bool).unwrap_or(false)
}
