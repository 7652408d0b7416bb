//! ONNX value types and tensors as tensor-IR types and constants.

use std::collections::{HashMap, HashSet};

use kiln_tir::{DType, Dim, Tensor, TensorData, TensorType};

use super::ImportError;
use crate::load::{self, OnnxFile};
use crate::proto::{type_proto, TensorProto, TypeProto};

/// The dim symbols of one import: exporters' dim names spelled as identifiers, one symbol per
/// distinct name (`a-b` and `a_b` stay two symbols), and fresh symbols for unknown dims that
/// collide with none of them.
#[derive(Default)]
pub struct Symbols {
    by_name: HashMap<String, String>,
    used: HashSet<String>,
    fresh: u32,
}

impl Symbols {
    /// The symbol for the exporter's dim name `raw`: the same symbol each time it is asked for.
    pub fn named(&mut self, raw: &str) -> Dim {
        if let Some(s) = self.by_name.get(raw) {
            return Dim::sym(s);
        }
        let d = self.unique(raw);
        if let Some(s) = d.symbols().first() {
            self.by_name.insert(raw.to_string(), s.to_string());
        }
        d
    }

    /// A symbol of its own spelled like `raw` (`raw_2`, `raw_3`, ... when taken).
    pub fn unique(&mut self, raw: &str) -> Dim {
        let base = identifier(raw);
        let mut name = base.clone();
        let mut k = 1;
        while !self.used.insert(name.clone()) {
            k += 1;
            name = format!("{base}_{k}");
        }
        Dim::sym(&name)
    }

    /// A symbol no other dim uses, `{stem}N`.
    pub fn fresh(&mut self, stem: &str) -> Dim {
        loop {
            self.fresh += 1;
            let name = format!("{}{}", identifier(stem), self.fresh);
            if self.used.insert(name.clone()) {
                return Dim::sym(&name);
            }
        }
    }
}

/// `raw` spelled as an identifier: other characters become `_`, and a leading digit gets one.
fn identifier(raw: &str) -> String {
    let mut s: String = raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() || s.as_bytes()[0].is_ascii_digit() {
        s.insert(0, '_');
    }
    s
}

/// The tensor type declared by `tp`, if it declares a tensor with an element type and a shape.
///
/// Exporters write a dynamic dim as a name, `?`, an empty name, no value, or a negative value
/// (`-1`); named dims become that name's symbol, the others each a fresh symbol.
pub fn tensor_type(tp: Option<&TypeProto>, what: &str, stem: &str, symbols: &mut Symbols) -> Result<Option<TensorType>, ImportError> {
    let Some(value) = tp.and_then(|t| t.value.as_ref()) else {
        return Ok(None);
    };
    let t = match value {
        type_proto::Value::TensorType(t) => t,
        other => {
            let kind = match other {
                type_proto::Value::SequenceType(_) => "a sequence",
                type_proto::Value::MapType(_) => "a map",
                type_proto::Value::OptionalType(_) => "an optional",
                type_proto::Value::SparseTensorType(_) => "a sparse tensor",
                _ => "an opaque value",
            };
            return Err(ImportError::Unsupported { location: what.to_string(), reason: format!("{kind} type; kiln supports tensor values only") });
        }
    };
    let Some(code) = t.elem_type else { return Ok(None) };
    let dtype = dtype(code, what)?;
    let Some(shape) = &t.shape else { return Ok(None) };
    let mut dims = Vec::with_capacity(shape.dim.len());
    for (axis, d) in shape.dim.iter().enumerate() {
        use crate::proto::tensor_shape_proto::dimension::Value;
        dims.push(match &d.value {
            Some(Value::DimValue(v)) if *v >= 0 => Dim::Known(*v as u64),
            Some(Value::DimParam(p)) if !p.is_empty() && p != "?" => symbols.named(p),
            _ => symbols.unique(&format!("{stem}_{axis}")),
        });
    }
    Ok(Some(TensorType { dtype, shape: dims }))
}

/// The element type for ONNX code `code`.
pub fn dtype(code: i32, what: &str) -> Result<DType, ImportError> {
    DType::from_onnx(code).ok_or_else(|| ImportError::Invalid { location: what.to_string(), reason: format!("unknown element type code {code}") })
}

/// A constant tensor from a `TensorProto`, its bytes borrowed from the file where possible.
pub fn tensor(file: &OnnxFile, t: &TensorProto, what: &str) -> Result<Tensor, ImportError> {
    let dtype = dtype(t.data_type.unwrap_or(0), what)?;
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        let d = u64::try_from(d).map_err(|_| ImportError::Invalid { location: what.to_string(), reason: format!("negative dim {d}") })?;
        shape.push(d);
    }
    let data = match file.tensor_data(t)? {
        load::TensorData::Raw(b) => TensorData::Raw(b),
        load::TensorData::Strings(s) => TensorData::Strings(s),
    };
    Ok(Tensor { dtype, shape, data })
}

/// Reads a serialized `TensorProto` (a node-suite `input_0.pb`, a `kiln run --input` file) and
/// returns its name and tensor. External data is resolved next to the file.
pub fn read_tensor_file(path: &std::path::Path) -> Result<(String, Tensor), ImportError> {
    use prost::Message;
    let bytes = crate::load::read_regular_file(path).map_err(|error| ImportError::Load(crate::load::LoadError::Io { path: path.to_path_buf(), error }))?;
    let what = format!("tensor file {}", path.display());
    let proto = TensorProto::decode(bytes.as_slice()).map_err(|e| ImportError::Invalid { location: what.clone(), reason: e.to_string() })?;
    let dir = path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let holder = OnnxFile::from_bytes_with_base_dir(bytes::Bytes::new(), dir)?;
    let t = tensor(&holder, &proto, &what)?;
    Ok((proto.name.unwrap_or_default(), t))
}
