//! Request tensors to kiln tensors and back: JSON `data` (flat or nested, row-major) or the
//! binary-data extension's bytes (little-endian; `BYTES` elements each after a 4-byte length).

use bytes::{BufMut, Bytes, BytesMut};
use kiln::{DType, Tensor, TensorData};
use serde_json::{Number, Value};

use crate::error::ApiError;
use crate::protocol::{self, RequestInput};
pub use kiln_tir::echo::text as echo;

/// The kiln element type the protocol's `datatype` names.
pub fn dtype_of(input: &RequestInput) -> Result<DType, ApiError> {
    const ALL: [DType; 14] = [
        DType::Bool, DType::U8, DType::U16, DType::U32, DType::U64, DType::I8, DType::I16, DType::I32, DType::I64,
        DType::F16, DType::BF16, DType::F32, DType::F64, DType::String,
    ];
    ALL.into_iter()
        .find(|&d| protocol::datatype(d) == Some(input.datatype.as_str()))
        .ok_or_else(|| ApiError::bad(format!("input \"{}\": unknown datatype \"{}\"", echo(&input.name), echo(&input.datatype))))
}

/// The request's `shape` as dims, and the element count, checked against overflow.
fn dims_of(input: &RequestInput) -> Result<(Vec<u64>, u64), ApiError> {
    let mut numel = 1u64;
    let mut dims = Vec::with_capacity(input.shape.len());
    for (k, &d) in input.shape.iter().enumerate() {
        let d = u64::try_from(d).map_err(|_| ApiError::bad(format!("input \"{}\": shape[{k}] is {d}, not a size", echo(&input.name))))?;
        numel = numel.checked_mul(d).ok_or_else(|| ApiError::too_large(format!("input \"{}\": the element count of shape {} overflows", echo(&input.name), kiln_tir::echo::list(&input.shape))))?;
        dims.push(d);
    }
    Ok((dims, numel))
}

/// Decodes one input. `binary` is its bytes when the request sent them after the JSON.
/// Nothing is allocated for a tensor over `max_bytes`.
pub fn decode(input: &RequestInput, binary: Option<Bytes>, max_bytes: u64) -> Result<Tensor, ApiError> {
    let name = echo(&input.name);
    let dtype = dtype_of(input)?;
    let (shape, numel) = dims_of(input)?;
    let shown = kiln_tir::echo::list(&shape);
    // A string counts as 32 bytes here, as in kiln's limits; its real bytes are in the body.
    let bytes = dtype.storage_bytes(numel).unwrap_or(numel.saturating_mul(32));
    if bytes > max_bytes {
        return Err(ApiError::too_large(format!("input \"{name}\": shape {shown} of {} takes {bytes} bytes, over the limit of {max_bytes} for one tensor", input.datatype)));
    }
    let data = match (binary, &input.data) {
        (Some(_), Some(_)) => return Err(ApiError::bad(format!("input \"{name}\": has both \"data\" and \"binary_data_size\""))),
        (None, None) => return Err(ApiError::bad(format!("input \"{name}\": has no \"data\" and no \"binary_data_size\""))),
        (Some(raw), None) if dtype == DType::String => TensorData::Strings(split_strings(&raw, numel).map_err(|e| ApiError::bad(format!("input \"{name}\": {e}")))?),
        (Some(raw), None) => {
            if raw.len() as u64 != bytes {
                return Err(ApiError::bad(format!("input \"{name}\": {} binary bytes for shape {shown} of {}, which takes {bytes}", raw.len(), input.datatype)));
            }
            TensorData::Raw(raw)
        }
        (None, Some(data)) => {
            let mut flat = Vec::new();
            flatten(data, &mut flat, numel).map_err(|e| ApiError::bad(format!("input \"{name}\": \"data\" {e}")))?;
            if flat.len() as u64 != numel {
                return Err(ApiError::bad(format!("input \"{name}\": \"data\" has {} elements, shape {shown} has {numel}", flat.len())));
            }
            encode_json(dtype, &flat).map_err(|(i, why)| ApiError::bad(format!("input \"{name}\": data[{i}] {why}")))?
        }
    };
    Ok(Tensor { dtype, shape, data })
}

/// Appends `value`'s leaves to `out` in row-major order, refusing more than `limit`.
fn flatten<'a>(value: &'a Value, out: &mut Vec<&'a Value>, limit: u64) -> Result<(), String> {
    match value {
        Value::Array(items) => items.iter().try_for_each(|v| flatten(v, out, limit)),
        leaf => {
            if out.len() as u64 >= limit {
                return Err(format!("has more than {limit} elements"));
            }
            out.push(leaf);
            Ok(())
        }
    }
}

/// JSON elements as tensor data of `dtype`; an error gives the element's index and why.
fn encode_json(dtype: DType, values: &[&Value]) -> Result<TensorData, (usize, String)> {
    if dtype == DType::String {
        let strings = values.iter().enumerate().map(|(i, v)| v.as_str().map(|s| Bytes::copy_from_slice(s.as_bytes())).ok_or((i, format!("is {}, not a string", short(v))))).collect::<Result<_, _>>()?;
        return Ok(TensorData::Strings(strings));
    }
    let width = dtype.storage_bytes(1).unwrap_or(0) as usize;
    let mut out = BytesMut::with_capacity(values.len() * width);
    for (i, v) in values.iter().enumerate() {
        let bad = |what: &str| (i, format!("is {}, not {what}", short(v)));
        macro_rules! int {
            ($t:ty, $put:ident) => {{
                let x = v.as_i64().and_then(|x| <$t>::try_from(x).ok()).or_else(|| v.as_u64().and_then(|x| <$t>::try_from(x).ok()));
                out.$put(x.ok_or_else(|| bad(concat!("a ", stringify!($t))))?)
            }};
        }
        let float = || v.as_f64().ok_or_else(|| bad("a number"));
        match dtype {
            DType::Bool => out.put_u8(u8::from(v.as_bool().ok_or_else(|| bad("true or false"))?)),
            DType::U8 => int!(u8, put_u8),
            DType::I8 => int!(i8, put_i8),
            DType::U16 => int!(u16, put_u16_le),
            DType::I16 => int!(i16, put_i16_le),
            DType::U32 => int!(u32, put_u32_le),
            DType::I32 => int!(i32, put_i32_le),
            DType::U64 => int!(u64, put_u64_le),
            DType::I64 => int!(i64, put_i64_le),
            DType::F16 => out.put_u16_le(half::f16::from_f64(float()?).to_bits()),
            DType::BF16 => out.put_u16_le(half::bf16::from_f64(float()?).to_bits()),
            DType::F32 => out.put_f32_le(float()? as f32),
            DType::F64 => out.put_f64_le(float()?),
            other => return Err((i, format!("has type {}, which the protocol cannot carry", other.name()))),
        }
    }
    Ok(TensorData::Raw(out.freeze()))
}

/// `BYTES` elements from the binary extension: each a little-endian u32 length, then the bytes.
fn split_strings(raw: &Bytes, numel: u64) -> Result<Vec<Bytes>, String> {
    let mut items = Vec::new();
    let mut at = 0usize;
    while at < raw.len() {
        let len = raw.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize).ok_or(format!("byte {at}: a truncated string length"))?;
        let end = at.checked_add(4 + len).filter(|&e| e <= raw.len()).ok_or(format!("byte {at}: a string of {len} bytes runs past the tensor's end"))?;
        if items.len() as u64 == numel {
            return Err(format!("byte {at}: more than the shape's {numel} strings"));
        }
        items.push(raw.slice(at + 4..end));
        at = end;
    }
    if items.len() as u64 != numel {
        return Err(format!("{} strings, the shape has {numel}", items.len()));
    }
    Ok(items)
}

/// An output's bytes for the binary extension.
pub fn to_binary(t: &Tensor) -> Bytes {
    match &t.data {
        TensorData::Raw(b) => b.clone(),
        TensorData::Strings(items) => {
            let mut out = BytesMut::new();
            for s in items {
                out.put_u32_le(s.len() as u32);
                out.put_slice(s);
            }
            out.freeze()
        }
        TensorData::Absent => Bytes::new(),
    }
}

/// An output's elements as a flat JSON array. Floats that JSON cannot hold (NaN, ±inf) become
/// `null`: ask for binary outputs to keep them.
pub fn to_json(t: &Tensor) -> Value {
    let raw = match &t.data {
        TensorData::Strings(items) => return Value::Array(items.iter().map(|s| Value::String(String::from_utf8_lossy(s).into_owned())).collect()),
        TensorData::Raw(b) => b,
        TensorData::Absent => return Value::Array(Vec::new()),
    };
    let float = |x: f64| Number::from_f64(x).map_or(Value::Null, Value::Number);
    macro_rules! each {
        ($n:literal, $f:expr) => {
            raw.chunks_exact($n).map(|c| $f(c.try_into().unwrap_or([0; $n]))).collect()
        };
    }
    Value::Array(match t.dtype {
        DType::Bool => raw.iter().map(|&b| Value::Bool(b != 0)).collect(),
        DType::U8 => raw.iter().map(|&b| Value::from(b)).collect(),
        DType::I8 => raw.iter().map(|&b| Value::from(b as i8)).collect(),
        DType::U16 => each!(2, |c| Value::from(u16::from_le_bytes(c))),
        DType::I16 => each!(2, |c| Value::from(i16::from_le_bytes(c))),
        DType::U32 => each!(4, |c| Value::from(u32::from_le_bytes(c))),
        DType::I32 => each!(4, |c| Value::from(i32::from_le_bytes(c))),
        DType::U64 => each!(8, |c| Value::from(u64::from_le_bytes(c))),
        DType::I64 => each!(8, |c| Value::from(i64::from_le_bytes(c))),
        DType::F16 => each!(2, |c| float(half::f16::from_le_bytes(c).to_f64())),
        DType::BF16 => each!(2, |c| float(half::bf16::from_le_bytes(c).to_f64())),
        DType::F32 => each!(4, |c| float(f64::from(f32::from_le_bytes(c)))),
        DType::F64 => each!(8, |c| float(f64::from_le_bytes(c))),
        _ => Vec::new(),
    })
}

/// A JSON value shortened for an error message.
fn short(v: &Value) -> String {
    echo(&v.to_string()).into_owned()
}
