//! Where in the file a model fails to decode: a walk of the protobuf wire format that follows
//! the message-typed fields of `onnx.proto`, in the order the decoder reads them, and stops at
//! the first byte it cannot read: a truncated varint or length, a length past its message's
//! end, a wire type protobuf does not have, nesting past the decoder's limit.

/// The decoder's nesting limit (prost's default).
const MAX_DEPTH: usize = 100;

/// Field `field` of message `msg` when it holds messages: its name and message type.
fn submessage(msg: &str, field: u64) -> Option<(&'static str, &'static str)> {
    const FIELDS: &[(&str, u64, &str, &str)] = &[
        ("ModelProto", 7, "graph", "GraphProto"),
        ("ModelProto", 8, "opset_import", "OperatorSetIdProto"),
        ("ModelProto", 14, "metadata_props", "StringStringEntryProto"),
        ("ModelProto", 20, "training_info", "TrainingInfoProto"),
        ("ModelProto", 25, "functions", "FunctionProto"),
        ("GraphProto", 1, "node", "NodeProto"),
        ("GraphProto", 5, "initializer", "TensorProto"),
        ("GraphProto", 11, "input", "ValueInfoProto"),
        ("GraphProto", 12, "output", "ValueInfoProto"),
        ("GraphProto", 13, "value_info", "ValueInfoProto"),
        ("GraphProto", 14, "quantization_annotation", "TensorAnnotation"),
        ("GraphProto", 15, "sparse_initializer", "SparseTensorProto"),
        ("GraphProto", 16, "metadata_props", "StringStringEntryProto"),
        ("NodeProto", 5, "attribute", "AttributeProto"),
        ("NodeProto", 9, "metadata_props", "StringStringEntryProto"),
        ("AttributeProto", 5, "t", "TensorProto"),
        ("AttributeProto", 6, "g", "GraphProto"),
        ("AttributeProto", 10, "tensors", "TensorProto"),
        ("AttributeProto", 11, "graphs", "GraphProto"),
        ("AttributeProto", 14, "tp", "TypeProto"),
        ("AttributeProto", 15, "type_protos", "TypeProto"),
        ("AttributeProto", 22, "sparse_tensor", "SparseTensorProto"),
        ("AttributeProto", 23, "sparse_tensors", "SparseTensorProto"),
        ("TensorProto", 3, "segment", "Segment"),
        ("TensorProto", 13, "external_data", "StringStringEntryProto"),
        ("TensorProto", 16, "metadata_props", "StringStringEntryProto"),
        ("SparseTensorProto", 1, "values", "TensorProto"),
        ("SparseTensorProto", 2, "indices", "TensorProto"),
        ("ValueInfoProto", 2, "type", "TypeProto"),
        ("ValueInfoProto", 4, "metadata_props", "StringStringEntryProto"),
        ("TypeProto", 1, "tensor_type", "Tensor"),
        ("TypeProto", 4, "sequence_type", "Sequence"),
        ("TypeProto", 5, "map_type", "Map"),
        ("TypeProto", 8, "sparse_tensor_type", "SparseTensor"),
        ("TypeProto", 9, "optional_type", "Optional"),
        ("Tensor", 2, "shape", "TensorShapeProto"),
        ("SparseTensor", 2, "shape", "TensorShapeProto"),
        ("Sequence", 1, "elem_type", "TypeProto"),
        ("Optional", 1, "elem_type", "TypeProto"),
        ("Map", 2, "value_type", "TypeProto"),
        ("TensorShapeProto", 1, "dim", "Dimension"),
        ("TensorAnnotation", 2, "quant_parameter_tensor_names", "StringStringEntryProto"),
        ("TrainingInfoProto", 1, "initialization", "GraphProto"),
        ("TrainingInfoProto", 2, "algorithm", "GraphProto"),
        ("TrainingInfoProto", 3, "initialization_binding", "StringStringEntryProto"),
        ("TrainingInfoProto", 4, "update_binding", "StringStringEntryProto"),
        ("FunctionProto", 7, "node", "NodeProto"),
        ("FunctionProto", 9, "opset_import", "OperatorSetIdProto"),
        ("FunctionProto", 11, "attribute_proto", "AttributeProto"),
        ("FunctionProto", 12, "value_info", "ValueInfoProto"),
        ("FunctionProto", 14, "metadata_props", "StringStringEntryProto"),
    ];
    FIELDS.iter().find(|&&(m, f, _, _)| m == msg && f == field).map(|&(_, _, name, ty)| (name, ty))
}

/// The first place `bytes` (a `ModelProto`) cannot be read, as `byte N: what (in A.f > B.g)`,
/// or `None` when the wire format holds together (the decoder then objected to a value, such
/// as a string that is not UTF-8).
pub fn locate(bytes: &[u8]) -> Option<String> {
    let mut path = Vec::new();
    walk(bytes, 0, "ModelProto", 0, &mut path).err().map(|(at, what)| {
        let shown = match path.len() {
            0 => return format!("byte {at}: {what}"),
            n if n > 6 => format!("{} > … ({} more) > {}", path[..2].join(" > "), n - 5, path[n - 3..].join(" > ")),
            _ => path.join(" > "),
        };
        format!("byte {at}: {what} (in {shown})")
    })
}

/// Walks message `msg` held in `bytes`, which start at file offset `base`. On failure `path`
/// holds the fields from the outermost message in.
fn walk(bytes: &[u8], base: usize, msg: &'static str, depth: usize, path: &mut Vec<String>) -> Result<(), (usize, String)> {
    let mut at = 0;
    while at < bytes.len() {
        let field_at = base + at;
        let key = varint(bytes, &mut at).ok_or((field_at, "a field key is cut off".to_string()))?;
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return Err((field_at, "field number 0".into()));
        }
        match wire {
            0 => {
                varint(bytes, &mut at).ok_or((field_at, format!("field {field}: a varint is cut off")))?;
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if bytes.len() - at < n {
                    return Err((field_at, format!("field {field}: {n} bytes needed, {} left", bytes.len() - at)));
                }
                at += n;
            }
            2 => {
                let len = varint(bytes, &mut at).ok_or((field_at, format!("field {field}: a length is cut off")))?;
                let left = bytes.len() - at;
                if len > left as u64 {
                    return Err((field_at, format!("field {field}: a length of {len} bytes, {left} left in its message")));
                }
                let payload = &bytes[at..at + len as usize];
                if let Some((name, sub)) = submessage(msg, field) {
                    path.push(format!("{msg}.{name} at byte {field_at}"));
                    if depth + 1 >= MAX_DEPTH {
                        return Err((field_at, format!("messages nest deeper than {MAX_DEPTH} levels")));
                    }
                    walk(payload, base + at, sub, depth + 1, path)?;
                    path.pop();
                }
                at += len as usize;
            }
            w => return Err((field_at, format!("field {field}: wire type {w} is not one protobuf has"))),
        }
    }
    Ok(())
}

/// A base-128 varint at `*at`, advancing past it; `None` if cut off or longer than ten bytes.
fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in 0..10 {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << (7 * shift);
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_length_is_found_at_its_field() {
        // ModelProto.graph (field 7, wire 2) of 5 bytes, holding GraphProto.node (field 1) that
        // claims 9 bytes.
        let bytes = [0x08, 0x07, 0x3a, 0x05, 0x0a, 0x09, 0x01, 0x02, 0x03];
        assert_eq!(locate(&bytes).unwrap(), "byte 4: field 1: a length of 9 bytes, 3 left in its message (in ModelProto.graph at byte 2)");
        assert_eq!(locate(&bytes[..3]).unwrap(), "byte 2: field 7: a length is cut off");
        assert_eq!(locate(&[0x08, 0x07]), None);
        assert_eq!(locate(&[0x0b]).unwrap(), "byte 0: field 1: wire type 3 is not one protobuf has");
    }
}
