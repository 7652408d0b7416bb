//! Tests for the zero-copy ONNX loader, and for corrupted models all the way through import
//! and the text form.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use kiln_onnx::load::{LoadError, OnnxFile, TensorData};
use kiln_onnx::proto::tensor_proto::{DataLocation, DataType};
use kiln_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto,
};
use prost::Message;

// ---------------------------------------------------------------- helpers

fn tensor(name: &str, dt: DataType, dims: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(dt as i32),
        dims: dims.to_vec(),
        ..Default::default()
    }
}

fn model_with(initializers: Vec<TensorProto>) -> ModelProto {
    ModelProto {
        ir_version: Some(10),
        producer_name: Some("kiln-test".into()),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![NodeProto {
                op_type: Some("Add".into()),
                input: vec!["x".into(), "w".into()],
                output: vec!["y".into()],
                attribute: vec![AttributeProto {
                    name: Some("note".into()),
                    s: Some(Bytes::from_static(b"hi")),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            initializer: initializers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn encode(m: &ModelProto) -> Bytes {
    Bytes::from(m.encode_to_vec())
}

/// Loads a one-initializer model from memory and resolves that initializer.
fn roundtrip(t: TensorProto) -> Result<TensorData, LoadError> {
    let file = OnnxFile::from_bytes(encode(&model_with(vec![t]))).expect("decode");
    file.tensor_data(&file.model.graph.as_ref().unwrap().initializer[0])
}

fn raw(t: TensorProto) -> Vec<u8> {
    match roundtrip(t).expect("tensor data") {
        TensorData::Raw(b) => b.to_vec(),
        other => panic!("expected raw data, got {other:?}"),
    }
}

fn inside(inner: &[u8], outer: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    i >= o && i + inner.len() <= o + outer.len()
}

/// A fresh, unique directory under the system temp dir (removed on drop).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "kiln-onnx-{tag}-{}-{n}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn external(name: &str, dt: DataType, dims: &[i64], kv: &[(&str, &str)]) -> TensorProto {
    TensorProto {
        data_location: Some(DataLocation::External as i32),
        external_data: kv
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: Some(k.to_string()),
                value: Some(v.to_string()),
            })
            .collect(),
        ..tensor(name, dt, dims)
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

mod raw;
mod typed;
mod external;
mod corrupt;
mod model;
mod schema;
