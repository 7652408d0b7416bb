//! NumPy `.npy` files (format versions 1.0–3.0, little-endian, C order) as kiln tensors.

use bytes::Bytes;
use kiln_tir::{DType, Tensor, TensorData};

const MAGIC: &[u8] = b"\x93NUMPY";

pub(crate) fn descr(d: DType) -> Option<&'static str> {
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

/// Serializes `t` as a `.npy` file: version 1.0, or 2.0 when the header needs more than 64 KiB
/// (a shape of some thousands of dims).
pub fn write(t: &Tensor) -> Result<Vec<u8>, String> {
    let d = descr(t.dtype).ok_or_else(|| format!("{} tensors have no .npy form", t.dtype))?;
    let raw = t.raw().ok_or("the tensor has no bytes")?;
    let shape = match t.shape.len() {
        1 => format!("({},)", t.shape[0]),
        _ => format!("({})", t.shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    let version: u8 = if MAGIC.len() + 4 + header.len() + 64 > usize::from(u16::MAX) { 2 } else { 1 };
    let len_bytes = if version == 1 { 2 } else { 4 };
    // Pad so the data starts at a multiple of 64 bytes; the header ends with a newline.
    let unpadded = MAGIC.len() + 2 + len_bytes + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::new();
    out.try_reserve_exact(MAGIC.len() + 2 + len_bytes + header.len() + raw.len()).map_err(|_| "no memory for the .npy file")?;
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    match version {
        1 => out.extend_from_slice(&(header.len() as u16).to_le_bytes()),
        _ => out.extend_from_slice(&u32::try_from(header.len()).map_err(|_| "the .npy header is over 4 GiB")?.to_le_bytes()),
    }
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
    let Header { descr, fortran_order, shape } = Header::parse(header).map_err(|e| format!("the .npy header: {e}"))?;
    let dtype = dtype_of(&descr).ok_or_else(|| format!("unsupported .npy dtype '{}'", kiln_tir::echo::text(&descr)))?;
    if fortran_order && shape.len() > 1 {
        return Err("Fortran-order .npy files are not supported".into());
    }
    let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or("the .npy shape overflows")?;
    let want = dtype.storage_bytes(numel).ok_or("the .npy shape overflows")?;
    let data = &bytes[start + len..];
    if data.len() as u64 != want {
        return Err(format!("the .npy data holds {} bytes; shape {} of {dtype} needs {want}", data.len(), kiln_tir::echo::list(&shape)));
    }
    Ok(Tensor { dtype, shape, data: TensorData::Raw(Bytes::copy_from_slice(data)) })
}

/// The header dict: a Python literal `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`
/// with exactly these three keys, in any order, as numpy requires.
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<u64>,
}

/// A value of the header dict.
enum Literal {
    Str(String),
    Bool(bool),
    Tuple(Vec<u64>),
}

impl Header {
    fn parse(text: &str) -> Result<Header, String> {
        let mut p = Parser { s: text.as_bytes(), at: 0 };
        p.expect(b'{')?;
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        loop {
            p.space();
            if p.eat(b'}') {
                break;
            }
            let key = p.string()?;
            p.space();
            p.expect(b':')?;
            p.space();
            let value = p.literal()?;
            let slot_taken = match (key.as_str(), value) {
                ("descr", Literal::Str(s)) => descr.replace(s).is_some(),
                ("fortran_order", Literal::Bool(b)) => fortran.replace(b).is_some(),
                ("shape", Literal::Tuple(t)) => shape.replace(t).is_some(),
                ("descr" | "fortran_order" | "shape", _) => return Err(format!("'{key}' has a value of the wrong kind")),
                _ => return Err(format!("unexpected key '{}'", kiln_tir::echo::text(&key))),
            };
            if slot_taken {
                return Err(format!("'{key}' appears twice"));
            }
            p.space();
            if !p.eat(b',') {
                p.space();
                p.expect(b'}')?;
                break;
            }
        }
        if !text[p.at..].trim().is_empty() {
            return Err("text after the dict".into());
        }
        let missing = |k: &str| format!("no '{k}'");
        Ok(Header { descr: descr.ok_or_else(|| missing("descr"))?, fortran_order: fortran.ok_or_else(|| missing("fortran_order"))?, shape: shape.ok_or_else(|| missing("shape"))? })
    }
}

/// A cursor over the header text.
struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn space(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.s.get(self.at) == Some(&c);
        self.at += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) { Ok(()) } else { Err(format!("expected '{}' at byte {}", c as char, self.at)) }
    }

    /// A quoted string without escapes (all numpy writes).
    fn string(&mut self) -> Result<String, String> {
        let quote = match self.s.get(self.at) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a quoted string at byte {}", self.at)),
        };
        let from = self.at + 1;
        let len = self.s[from..].iter().position(|&c| c == quote).ok_or("unterminated string")?;
        self.at = from + len + 1;
        String::from_utf8(self.s[from..from + len].to_vec()).map_err(|_| "a string is not UTF-8".into())
    }

    fn literal(&mut self) -> Result<Literal, String> {
        for (word, b) in [("True", true), ("False", false)] {
            if self.s[self.at..].starts_with(word.as_bytes()) {
                self.at += word.len();
                return Ok(Literal::Bool(b));
            }
        }
        if !self.eat(b'(') {
            return self.string().map(Literal::Str);
        }
        let mut dims = Vec::new();
        loop {
            self.space();
            if self.eat(b')') {
                return Ok(Literal::Tuple(dims));
            }
            let from = self.at;
            while self.s.get(self.at).is_some_and(u8::is_ascii_digit) {
                self.at += 1;
            }
            let digits = std::str::from_utf8(&self.s[from..self.at]).unwrap_or_default();
            dims.push(digits.parse::<u64>().map_err(|_| format!("expected a dim at byte {from}"))?);
            self.space();
            if !self.eat(b',') {
                self.space();
                self.expect(b')')?;
                return Ok(Literal::Tuple(dims));
            }
        }
    }
}

/// One `.npy` file name per tensor name (`kiln run`'s outputs): the name with characters outside
/// `[A-Za-z0-9._-]` replaced by `_` (cut to 100 characters), made unique with `_2`, `_3`...
/// when two names map alike (ignoring case, for case-insensitive file systems).
pub fn file_names(names: &[&str]) -> Vec<String> {
    let mut taken = std::collections::HashSet::new();
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut base: String = name.chars().take(100).map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
            if base.is_empty() || base.starts_with('.') {
                base = format!("output{i}{base}");
            }
            let mut file = format!("{base}.npy");
            let mut k = 2;
            while !taken.insert(file.to_ascii_lowercase()) {
                file = format!("{base}_{k}.npy");
                k += 1;
            }
            file
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_unique_and_plain() {
        assert_eq!(super::file_names(&["a/b", "a_b", "A_b", "", ".."]), ["a_b.npy", "a_b_2.npy", "A_b_3.npy", "output3.npy", "output4...npy"]);
    }

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
    fn headers_are_parsed_as_dicts() {
        let file = |h: &str| {
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&[1, 0]);
            b.extend_from_slice(&(h.len() as u16).to_le_bytes());
            b.extend_from_slice(h.as_bytes());
            b.extend_from_slice(&[0; 8]);
            b
        };
        let t = read(&file("{'shape': (2,), \"descr\": '<f4', 'fortran_order': False}\n")).unwrap();
        assert_eq!((t.dtype, t.shape.clone()), (DType::F32, vec![2]));
        // Another key holding the text 'shape' does not decide the shape.
        let e = read(&file("{'descr': '<f4', 'note': \"'shape': (2,)\", 'fortran_order': False, 'shape': (2,)}")).unwrap_err();
        assert!(e.contains("unexpected key 'note'"), "{e}");
        let e = read(&file("{'descr': '<f4', 'shape': (2,), 'shape': (2,), 'fortran_order': False}")).unwrap_err();
        assert!(e.contains("'shape' appears twice"), "{e}");
        assert!(read(&file("{'descr': '<f4', 'fortran_order': False}")).unwrap_err().contains("no 'shape'"));
        assert!(read(&file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x)}")).is_err());
    }

    #[test]
    fn a_header_over_64_kib_is_written_as_version_2() {
        let shape = vec![1u64; 30_000];
        let t = Tensor::from_f32s(&shape, &[3.0]);
        let bytes = write(&t).unwrap();
        assert_eq!(bytes[6], 2);
        assert_eq!(read(&bytes).unwrap(), t);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(read(b"nope").is_err());
        let mut bytes = write(&Tensor::from_f32s(&[4], &[1.0; 4])).unwrap();
        bytes.truncate(bytes.len() - 1);
        assert!(read(&bytes).unwrap_err().contains("needs 16"));
    }
}
