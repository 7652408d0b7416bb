//! Enum-valued attributes are checked when a node is imported: a spelling ONNX does not define
//! is an error naming the node, the attribute and the allowed values.

use bytes::Bytes;
use kiln_onnx::import::import;
use kiln_onnx::load::OnnxFile;
use kiln_onnx::proto::tensor_proto::DataType;
use kiln_onnx::proto::tensor_shape_proto::{Dimension, dimension};
use kiln_onnx::proto::type_proto::{Tensor, Value};
use kiln_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use kiln_tir::op::{BitShift, ShiftDirection};
use kiln_tir::Op;
use prost::Message;

/// A `u8[4]` value named `name`.
fn u8s(name: &str) -> ValueInfoProto {
    let shape = TensorShapeProto { dim: vec![Dimension { value: Some(dimension::Value::DimValue(4)), ..Default::default() }] };
    let tensor = Tensor { elem_type: Some(DataType::Uint8 as i32), shape: Some(shape) };
    ValueInfoProto { name: Some(name.into()), r#type: Some(TypeProto { value: Some(Value::TensorType(tensor)), ..Default::default() }), ..Default::default() }
}

/// Imports `y = BitShift(x, s)` with `direction` spelled `direction`.
fn import_shift(direction: &str) -> Result<Op, String> {
    let node = NodeProto {
        name: Some("shift".into()),
        op_type: Some("BitShift".into()),
        input: vec!["x".into(), "s".into()],
        output: vec!["y".into()],
        attribute: vec![AttributeProto { name: Some("direction".into()), s: Some(Bytes::from(direction.to_string())), ..Default::default() }],
        ..Default::default()
    };
    let graph = GraphProto { name: Some("g".into()), node: vec![node], input: vec![u8s("x"), u8s("s")], output: vec![u8s("y")], ..Default::default() };
    let model = ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(21) }],
        graph: Some(graph),
        ..Default::default()
    };
    let file = OnnxFile::from_bytes(Bytes::from(model.encode_to_vec())).map_err(|e| e.to_string())?;
    let g = import(&file).map_err(|e| e.to_string())?;
    Ok(g.node(g.body.nodes[0]).op.clone())
}

#[test]
fn enum_attributes_are_checked_at_import() {
    assert_eq!(import_shift("LEFT"), Ok(Op::BitShift(BitShift { direction: ShiftDirection::Left })));
    let err = import_shift("UP").unwrap_err();
    assert!(err.contains("\"shift\"") && err.contains("attribute `direction`: `UP` is not one of `RIGHT`, `LEFT`"), "{err}");
}
