//! ONNX attributes as untyped tensor-IR attribute values.

use std::collections::HashMap;

use kiln_tir::op::AttrValue;

use super::types::tensor;
use super::ImportError;
use crate::load::OnnxFile;
use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, GraphProto};

/// An ONNX attribute after conversion: a plain value, or a subgraph that becomes a region.
pub enum OnnxAttr<'m> {
    /// A value the op's typed field takes.
    Value(AttrValue),
    /// A `GRAPH` attribute.
    Graph(&'m GraphProto),
}

/// The attributes a function call passes, for resolving `ref_attr_name` in its body.
pub type AttrEnv<'m> = HashMap<String, &'m AttributeProto>;

/// Converts the attributes of one node, resolving references to the enclosing function's
/// attributes through `env`. References to attributes the call does not set are dropped, as
/// ONNX specifies.
pub fn convert<'m>(file: &OnnxFile, list: &'m [AttributeProto], env: Option<&AttrEnv<'m>>, location: &str) -> Result<Vec<(String, OnnxAttr<'m>)>, ImportError> {
    let mut out = Vec::with_capacity(list.len());
    for a in list {
        let name = a.name.clone().unwrap_or_default();
        let resolved = match a.ref_attr_name.as_deref() {
            Some(r) if !r.is_empty() => match env.and_then(|e| e.get(r)) {
                Some(actual) => *actual,
                None => continue,
            },
            _ => a,
        };
        out.push((name.clone(), value(file, resolved, &format!("{location}, attribute `{name}`"))?));
    }
    Ok(out)
}

fn value<'m>(file: &OnnxFile, a: &'m AttributeProto, location: &str) -> Result<OnnxAttr<'m>, ImportError> {
    // IR version 1 models leave `type` out (or UNDEFINED); any other code must be one ONNX defines.
    let ty = match a.r#type {
        None | Some(0) => infer_type(a),
        Some(code) => AttributeType::try_from(code)
            .map_err(|_| ImportError::Invalid { location: location.to_string(), reason: format!("unknown attribute type {code}") })?,
    };
    let string = |b: &[u8]| {
        String::from_utf8(b.to_vec()).map_err(|_| ImportError::Invalid { location: location.to_string(), reason: "string is not UTF-8".into() })
    };
    let v = match ty {
        AttributeType::Int => AttrValue::Int(a.i.unwrap_or(0)),
        AttributeType::Float => AttrValue::Float(a.f.unwrap_or(0.0)),
        AttributeType::String => AttrValue::Str(string(a.s.as_deref().unwrap_or_default())?),
        AttributeType::Ints => AttrValue::Ints(a.ints.clone()),
        AttributeType::Floats => AttrValue::Floats(a.floats.clone()),
        AttributeType::Strings => AttrValue::Strs(a.strings.iter().map(|s| string(s)).collect::<Result<_, _>>()?),
        AttributeType::Tensor => match &a.t {
            Some(t) => AttrValue::Tensor(tensor(file, t, location)?),
            None => return Err(ImportError::Invalid { location: location.to_string(), reason: "tensor attribute without a tensor".into() }),
        },
        AttributeType::Graph => match &a.g {
            Some(g) => return Ok(OnnxAttr::Graph(g)),
            None => return Err(ImportError::Invalid { location: location.to_string(), reason: "graph attribute without a graph".into() }),
        },
        other => {
            return Err(ImportError::Unsupported { location: location.to_string(), reason: format!("attribute type {}", other.as_str_name()) });
        }
    };
    Ok(OnnxAttr::Value(v))
}

/// The type of an attribute written without its `type` field (IR version 1 models).
fn infer_type(a: &AttributeProto) -> AttributeType {
    if a.g.is_some() {
        AttributeType::Graph
    } else if a.t.is_some() {
        AttributeType::Tensor
    } else if a.s.is_some() {
        AttributeType::String
    } else if a.f.is_some() {
        AttributeType::Float
    } else if a.i.is_some() {
        AttributeType::Int
    } else if !a.floats.is_empty() {
        AttributeType::Floats
    } else if !a.strings.is_empty() {
        AttributeType::Strings
    } else {
        AttributeType::Ints
    }
}
