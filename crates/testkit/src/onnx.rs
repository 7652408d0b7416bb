//! A small builder of ONNX models for tests that need a model no exporter would write: hostile
//! shapes and attributes, odd opset imports, function bombs.

use kiln_onnx::proto::attribute_proto::AttributeType;
use kiln_onnx::proto::tensor_shape_proto::{Dimension, dimension};
use kiln_onnx::proto::{
    AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto, type_proto,
};
use prost::Message;

/// ONNX element type codes.
pub const FLOAT: i32 = 1;
/// `int64`.
pub const INT64: i32 = 7;
/// `bool`.
pub const BOOL: i32 = 9;

/// A node of `op` in the default domain.
pub fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// `n` with an integer-list attribute.
pub fn with_ints(mut n: NodeProto, name: &str, v: &[i64]) -> NodeProto {
    n.attribute.push(AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Ints as i32), ints: v.to_vec(), ..Default::default() });
    n
}

/// `n` with a float attribute whose type code is `ty` (a valid one is `AttributeType::Float`).
pub fn with_float(mut n: NodeProto, name: &str, v: f32, ty: i32) -> NodeProto {
    n.attribute.push(AttributeProto { name: Some(name.into()), r#type: Some(ty), f: Some(v), ..Default::default() });
    n
}

/// `n` with a graph attribute.
pub fn with_graph(mut n: NodeProto, name: &str, g: GraphProto) -> NodeProto {
    n.attribute.push(AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Graph as i32), g: Some(g), ..Default::default() });
    n
}

/// A value of element type `elem`; `dims` of `None` leaves the shape out, a negative dim is
/// written as such (older exporters' -1).
pub fn value(name: &str, elem: i32, dims: Option<&[i64]>) -> ValueInfoProto {
    let shape = dims.map(|d| TensorShapeProto {
        dim: d.iter().map(|&v| Dimension { value: Some(dimension::Value::DimValue(v)), ..Default::default() }).collect(),
    });
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(type_proto::Tensor { elem_type: Some(elem), shape })), ..Default::default() }),
        ..Default::default()
    }
}

/// An int64 initializer.
pub fn ints(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(INT64), int64_data: v.to_vec(), ..Default::default() }
}

/// A float initializer.
pub fn floats(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(FLOAT), float_data: v.to_vec(), ..Default::default() }
}

/// A graph.
pub fn graph(nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, outputs: Vec<ValueInfoProto>, inits: Vec<TensorProto>) -> GraphProto {
    GraphProto { name: Some("g".into()), node: nodes, input: inputs, output: outputs, initializer: inits, ..Default::default() }
}

/// An opset import.
pub fn opset(domain: &str, version: i64) -> OperatorSetIdProto {
    OperatorSetIdProto { domain: Some(domain.into()), version: Some(version) }
}

/// A model-local function `domain::name` of one input `a` and one output `b`.
pub fn function(domain: &str, name: &str, nodes: Vec<NodeProto>, opsets: Vec<OperatorSetIdProto>) -> FunctionProto {
    FunctionProto {
        domain: Some(domain.into()),
        name: Some(name.into()),
        input: vec!["a".into()],
        output: vec!["b".into()],
        node: nodes,
        opset_import: opsets,
        ..Default::default()
    }
}

/// A model of `g` (IR version 8) importing `opsets`, with `functions`; serialized.
pub fn model(g: GraphProto, opsets: Vec<OperatorSetIdProto>, functions: Vec<FunctionProto>) -> Vec<u8> {
    ModelProto { ir_version: Some(8), opset_import: opsets, graph: Some(g), functions, ..Default::default() }.encode_to_vec()
}
