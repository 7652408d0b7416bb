//! Conversion of a `TensorProto`'s data (raw, typed fields or external) into
//! the raw ONNX byte layout, with size checks against type and shape.

use bytes::Bytes;

use super::{LoadError, OnnxFile, TensorData, tensor_name};
use crate::proto::TensorProto;
use crate::proto::tensor_proto::{DataLocation, DataType};

/// Which typed field holds a data type's elements, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Storage {
    /// `float_data`, one f32 per element component.
    Float,
    /// `double_data`, one f64 per element component.
    Double,
    /// `int32_data`, one element per entry, stored as its low `bits` bits.
    Int32 { bits: u32 },
    /// `int32_data`, one element per entry, nonzero means true.
    Bool,
    /// `int32_data`, each entry one byte packing `per_byte` elements.
    Packed { per_byte: u64 },
    /// `int32_data`, one 6-bit element per entry; raw layout is a bit stream.
    Float6,
    /// `int64_data`.
    Int64,
    /// `uint64_data`, one element per entry, `bits` wide in the raw layout.
    UInt64 { bits: u32 },
    /// `string_data`.
    String,
}

/// Layout facts about one ONNX data type.
#[derive(Clone, Copy, Debug)]
struct DTypeInfo {
    /// Bits per element in the raw layout (0 for STRING).
    bits: u64,
    /// Typed-field storage.
    storage: Storage,
    /// Typed-field entries per element (2 for complex types).
    components: u64,
}

fn dtype_info(data_type: i32) -> Option<DTypeInfo> {
    use DataType as D;
    let dt = D::try_from(data_type).ok()?;
    let (bits, storage, components) = match dt {
        D::Undefined => return None,
        D::Float => (32, Storage::Float, 1),
        D::Double => (64, Storage::Double, 1),
        D::Complex64 => (64, Storage::Float, 2),
        D::Complex128 => (128, Storage::Double, 2),
        D::Uint8 | D::Int8 => (8, Storage::Int32 { bits: 8 }, 1),
        D::Float8e4m3fn | D::Float8e4m3fnuz | D::Float8e5m2 | D::Float8e5m2fnuz | D::Float8e8m0 => {
            (8, Storage::Int32 { bits: 8 }, 1)
        }
        D::Uint16 | D::Int16 | D::Float16 | D::Bfloat16 => (16, Storage::Int32 { bits: 16 }, 1),
        D::Int32 => (32, Storage::Int32 { bits: 32 }, 1),
        D::Bool => (8, Storage::Bool, 1),
        D::Uint4 | D::Int4 | D::Float4e2m1 => (4, Storage::Packed { per_byte: 2 }, 1),
        D::Uint2 | D::Int2 => (2, Storage::Packed { per_byte: 4 }, 1),
        D::Float6e2m3 | D::Float6e3m2 => (6, Storage::Float6, 1),
        D::Int64 => (64, Storage::Int64, 1),
        D::Uint32 => (32, Storage::UInt64 { bits: 32 }, 1),
        D::Uint64 => (64, Storage::UInt64 { bits: 64 }, 1),
        D::String => (0, Storage::String, 1),
    };
    Some(DTypeInfo {
        bits,
        storage,
        components,
    })
}

/// Number of bytes `numel` elements of `data_type` occupy in the raw ONNX
/// layout (sub-byte types rounded up to whole bytes). `None` for STRING,
/// unknown types, or overflow.
fn dtype_byte_len(data_type: i32, numel: u64) -> Option<u64> {
    let info = dtype_info(data_type)?;
    if info.bits == 0 {
        return None;
    }
    Some(numel.checked_mul(info.bits)?.div_ceil(8))
}

/// Element count of a shape; errors on negative dims or overflow.
fn element_count(dims: &[i64]) -> Result<u64, String> {
    dims.iter().try_fold(1u64, |acc, &d| {
        let d =
            u64::try_from(d).map_err(|_| format!("negative dimension {d} in shape {dims:?}"))?;
        acc.checked_mul(d)
            .ok_or_else(|| format!("element count of shape {dims:?} overflows"))
    })
}

fn dtype_name(data_type: i32) -> String {
    match DataType::try_from(data_type) {
        Ok(d) => d.as_str_name().to_string(),
        Err(_) => format!("data_type {data_type}"),
    }
}

pub(super) fn resolve(file: &OnnxFile, t: &TensorProto) -> Result<TensorData, LoadError> {
    let err = |reason: String| LoadError::TensorData {
        tensor: tensor_name(t),
        reason,
    };
    if t.segment.is_some() {
        return Err(err(
            "segmented tensors (TensorProto.segment) are not supported".into(),
        ));
    }
    let data_type = t.data_type();
    let info = dtype_info(data_type)
        .ok_or_else(|| err(format!("unknown or undefined data type {data_type}")))?;
    let numel = element_count(&t.dims).map_err(err)?;
    let location = t.data_location.unwrap_or(0);
    let external = match DataLocation::try_from(location) {
        Ok(DataLocation::Default) => false,
        Ok(DataLocation::External) => true,
        Err(_) => return Err(err(format!("unknown data_location {location}"))),
    };

    if info.storage == Storage::String {
        if external {
            return Err(err("STRING tensors cannot use external data".into()));
        }
        if t.raw_data.as_ref().is_some_and(|r| !r.is_empty()) {
            return Err(err(
                "STRING tensors must use string_data, not raw_data".into()
            ));
        }
        if t.string_data.len() as u64 != numel {
            return Err(err(format!(
                "shape {:?} has {numel} elements but string_data has {}",
                t.dims,
                t.string_data.len()
            )));
        }
        return Ok(TensorData::Strings(t.string_data.clone()));
    }

    let expected = dtype_byte_len(data_type, numel)
        .ok_or_else(|| err(format!("byte size of shape {:?} overflows", t.dims)))?;
    let check_len = |what: &str, got: usize| {
        if got as u64 == expected {
            Ok(())
        } else {
            Err(err(format!(
                "{what} has {got} bytes but {} x {:?} needs {expected}",
                dtype_name(data_type),
                t.dims
            )))
        }
    };

    if external {
        let data = file.external.resolve(t, file.base_dir())?;
        check_len("external data", data.len())?;
        return Ok(TensorData::Raw(data));
    }
    if let Some(raw) = t.raw_data.as_ref().filter(|r| !r.is_empty() || numel == 0) {
        check_len("raw_data", raw.len())?;
        return Ok(TensorData::Raw(raw.clone()));
    }
    let raw = typed_to_raw(t, info, numel).map_err(err)?;
    debug_assert_eq!(raw.len() as u64, expected);
    Ok(TensorData::Raw(Bytes::from(raw)))
}

/// Checks a typed field has exactly `want` entries.
fn check_count(field: &str, got: usize, want: u64, t: &TensorProto) -> Result<(), String> {
    if got as u64 == want {
        return Ok(());
    }
    let others = [
        ("float_data", t.float_data.len()),
        ("int32_data", t.int32_data.len()),
        ("int64_data", t.int64_data.len()),
        ("uint64_data", t.uint64_data.len()),
        ("double_data", t.double_data.len()),
        ("string_data", t.string_data.len()),
    ];
    let mut msg = format!(
        "{} x {:?} needs {want} entries in {field}, found {got}",
        dtype_name(t.data_type()),
        t.dims
    );
    if got == 0 {
        let filled: Vec<&str> = others
            .iter()
            .filter(|(f, n)| *n > 0 && *f != field)
            .map(|(f, _)| *f)
            .collect();
        if filled.is_empty() {
            msg.push_str(" (tensor has no data)");
        } else {
            msg.push_str(&format!(
                " (data is in {}, which does not match the data type)",
                filled.join(", ")
            ));
        }
    }
    Err(msg)
}

/// Converts the typed `*_data` field of `t` into the raw little-endian layout.
/// Entry counts are checked before allocating, so the output is no larger
/// than the data actually present in the message (times at most 8).
fn typed_to_raw(t: &TensorProto, info: DTypeInfo, numel: u64) -> Result<Vec<u8>, String> {
    let comps = numel
        .checked_mul(info.components)
        .ok_or_else(|| format!("element count of shape {:?} overflows", t.dims))?;
    match info.storage {
        Storage::Float => {
            check_count("float_data", t.float_data.len(), comps, t)?;
            Ok(t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect())
        }
        Storage::Double => {
            check_count("double_data", t.double_data.len(), comps, t)?;
            Ok(t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect())
        }
        Storage::Int64 => {
            check_count("int64_data", t.int64_data.len(), numel, t)?;
            Ok(t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect())
        }
        Storage::UInt64 { bits: 64 } => {
            check_count("uint64_data", t.uint64_data.len(), numel, t)?;
            Ok(t.uint64_data.iter().flat_map(|v| v.to_le_bytes()).collect())
        }
        Storage::UInt64 { .. } => {
            check_count("uint64_data", t.uint64_data.len(), numel, t)?;
            let mut out = Vec::with_capacity(t.uint64_data.len() * 4);
            for (i, &v) in t.uint64_data.iter().enumerate() {
                let v = u32::try_from(v)
                    .map_err(|_| format!("uint64_data[{i}] = {v} does not fit UINT32"))?;
                out.extend_from_slice(&v.to_le_bytes());
            }
            Ok(out)
        }
        Storage::Int32 { bits } => {
            check_count("int32_data", t.int32_data.len(), numel, t)?;
            let bytes = (bits / 8) as usize;
            let mut out = Vec::with_capacity(t.int32_data.len() * bytes);
            for (i, &v) in t.int32_data.iter().enumerate() {
                check_range(v, bits, i, t.data_type())?;
                out.extend_from_slice(&v.to_le_bytes()[..bytes]);
            }
            Ok(out)
        }
        Storage::Bool => {
            check_count("int32_data", t.int32_data.len(), numel, t)?;
            Ok(t.int32_data.iter().map(|&v| u8::from(v != 0)).collect())
        }
        Storage::Packed { per_byte } => {
            check_count(
                "int32_data",
                t.int32_data.len(),
                numel.div_ceil(per_byte),
                t,
            )?;
            let mut out = Vec::with_capacity(t.int32_data.len());
            for (i, &v) in t.int32_data.iter().enumerate() {
                check_range(v, 8, i, t.data_type())?;
                out.push(v as u8);
            }
            Ok(out)
        }
        Storage::Float6 => {
            check_count("int32_data", t.int32_data.len(), numel, t)?;
            let mut out = vec![0u8; (t.int32_data.len() * 6).div_ceil(8)];
            for (i, &v) in t.int32_data.iter().enumerate() {
                if !(0..64).contains(&v) {
                    return Err(format!("int32_data[{i}] = {v} is not a 6-bit value"));
                }
                let bit = i * 6;
                let word = (v as u16) << (bit % 8);
                out[bit / 8] |= word as u8;
                if let Some(next) = out.get_mut(bit / 8 + 1) {
                    *next |= (word >> 8) as u8;
                }
            }
            Ok(out)
        }
        Storage::String => unreachable!("STRING handled by caller"),
    }
}

/// Accepts values representable in `bits` bits as signed or unsigned.
fn check_range(v: i32, bits: u32, index: usize, data_type: i32) -> Result<(), String> {
    if bits >= 32 {
        return Ok(());
    }
    let v = i64::from(v);
    if v < -(1i64 << (bits - 1)) || v >= (1i64 << bits) {
        return Err(format!(
            "int32_data[{index}] = {v} does not fit the {bits}-bit storage of {}",
            dtype_name(data_type)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_lengths() {
        let d = |t: DataType| t as i32;
        assert_eq!(dtype_byte_len(d(DataType::Float), 3), Some(12));
        assert_eq!(dtype_byte_len(d(DataType::Complex128), 2), Some(32));
        assert_eq!(dtype_byte_len(d(DataType::Int4), 3), Some(2));
        assert_eq!(dtype_byte_len(d(DataType::Uint2), 5), Some(2));
        assert_eq!(dtype_byte_len(d(DataType::Float6e2m3), 4), Some(3));
        assert_eq!(dtype_byte_len(d(DataType::Float6e3m2), 5), Some(4));
        assert_eq!(dtype_byte_len(d(DataType::Bool), 7), Some(7));
        assert_eq!(dtype_byte_len(d(DataType::String), 1), None);
        assert_eq!(dtype_byte_len(0, 1), None);
        assert_eq!(dtype_byte_len(99, 1), None);
        assert_eq!(dtype_byte_len(d(DataType::Double), u64::MAX / 4), None);
    }

    #[test]
    fn element_counts() {
        assert_eq!(element_count(&[]), Ok(1));
        assert_eq!(element_count(&[2, 0, 5]), Ok(0));
        assert!(element_count(&[2, -1]).unwrap_err().contains("negative"));
        assert!(
            element_count(&[i64::MAX, i64::MAX])
                .unwrap_err()
                .contains("overflows")
        );
    }
}
