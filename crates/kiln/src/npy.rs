//! NumPy `.npy` files (format versions 1.0–3.0, little-endian, C order) as kiln tensors.

use bytes::Bytes;
use kiln_tir::{DType, Tensor, TensorData};

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        _ => return None,
    })
}

fn dtype_of(descr: &str) -> Option<DType> {
    DType::ALL.iter().copied().find(|&d| self::descr(d).is_some_and(|x| x == descr || x.replace('|', "<") == descr || x.replace('<', "|") == descr))
}

/// Serializes `t` as a version 1.0 `.npy` file.
pub fn write(t: &Tensor) -> Result<Vec<u8>, String> {
    let d = descr(t.dtype).ok_or_else(|| format!("{} tensors have no .npy form", t.dtype))?;
    let raw = t.raw().ok_or("the tensor has no bytes")?;
    let shape = match t.shape.len() {
        1 => format!("({},)", t.shape[0]),
        _ => format!("({})", t.shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so the data starts at a multiple of 64 bytes; the header ends with a newline.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + raw.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(raw);
    Ok(out)
}

/// Parses a `.npy` file.
pub fn read(bytes: &[u8]) -> Result<Tensor, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (bad magic)".into());
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = bytes.get(start..start + len).ok_or("the .npy header is truncated")?;
    let header = std::str::from_utf8(header).map_err(|_| "the .npy header is not text")?;
    let field = |key: &str| -> Result<&str, String> {
        let at = header.find(&format!("'{key}'")).ok_or_else(|| format!("the .npy header has no '{key}'"))?;
        let rest = header[at + key.len() + 2..].trim_start().strip_prefix(':').ok_or("malformed .npy header")?;
        Ok(rest.trim_start())
    };
    let descr_text = field("descr")?.strip_prefix('\'').and_then(|r| r.split('\'').next()).ok_or("malformed descr")?;
    let dtype = dtype_of(descr_text).ok_or_else(|| format!("unsupported .npy dtype '{descr_text}'"))?;
    if field("fortran_order")?.starts_with("True") {
        return Err("Fortran-order .npy files are not supported".into());
    }
    let shape_text = field("shape")?.strip_prefix('(').and_then(|r| r.split(')').next()).ok_or("malformed shape")?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().map_err(|_| format!("bad dim '{s}' in .npy shape")))
        .collect::<Result<Vec<_>, _>>()?;
    let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or("the .npy shape overflows")?;
    let want = dtype.storage_bytes(numel).ok_or("the .npy shape overflows")?;
    let data = &bytes[start + len..];
    if data.len() as u64 != want {
        return Err(format!("the .npy data holds {} bytes; shape {shape:?} of {dtype} needs {want}", data.len()));
    }
    Ok(Tensor { dtype, shape, data: TensorData::Raw(Bytes::copy_from_slice(data)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = Tensor::from_f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let bytes = write(&t).unwrap();
        assert_eq!(bytes.len() % 64, 24 % 64);
        assert_eq!(read(&bytes).unwrap(), t);
        let s = Tensor::from_i64s(&[], &[7]);
        assert_eq!(read(&write(&s).unwrap()).unwrap(), s);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(read(b"nope").is_err());
        let mut bytes = write(&Tensor::from_f32s(&[4], &[1.0; 4])).unwrap();
        bytes.truncate(bytes.len() - 1);
        assert!(read(&bytes).unwrap_err().contains("needs 16"));
    }
}
