//! Literals both ways: tensor types, `dense<...>` tensors and attribute values.
//!
//! Inline elements are exact: floats of `f32`/`f64` print in Rust's shortest round-trip form
//! (`0.1`, `1e-5`, `nan`, `inf`, `-inf`), other float formats and NaNs with a payload print
//! their bits in hex (`0x3c00`), so every element reads back bit for bit.

use std::fmt::Write;

use bytes::Bytes;

use super::cursor::PResult;
use super::lex::write_quoted;
use super::parse::Parser;
use super::token::{Tok, lex};
use crate::dim::{Dim, is_symbol};
use crate::dtype::{DType, DTypeKind};
use crate::op::AttrValue;
use crate::tensor::{Tensor, TensorData};
use crate::types::TensorType;

/// Constants with at most this many elements print inline; larger ones by reference.
pub(super) const INLINE_MAX: u64 = 8;

/// Parenthesis depth allowed inside one dim, so `Dim::parse` cannot recurse without bound.
const MAX_DIM_NESTING: usize = 32;

/// Appends a type: `f32[1, batch, seq*4+1]`.
pub(super) fn write_type(out: &mut String, ty: &TensorType) {
    out.push_str(ty.dtype.name());
    out.push('[');
    for (i, d) in ty.shape.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_dim(out, d);
    }
    out.push(']');
}

/// A dim that is one symbol which is not an identifier (an ONNX `dim_param` like `"batch size"`)
/// prints quoted; everything else prints as [`Dim`]'s `Display` spells it.
fn write_dim(out: &mut String, d: &Dim) {
    if let Dim::Sym(_) = d
        && let [s] = d.symbols()[..]
        && !is_symbol(s)
        && *d == Dim::sym(s)
    {
        write_quoted(out, s.as_bytes());
        return;
    }
    let _ = write!(out, "{d}");
}

fn write_shape(out: &mut String, dtype: DType, shape: &[u64]) {
    out.push_str(dtype.name());
    out.push('[');
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{d}");
    }
    out.push(']');
}

/// True if the tensor's data is present and agrees with its dtype and shape.
pub(super) fn well_formed(t: &Tensor) -> bool {
    let Some(n) = t.numel() else { return false };
    match &t.data {
        TensorData::Raw(b) => t.dtype.storage_bytes(n) == Some(b.len() as u64),
        TensorData::Strings(s) => t.dtype == DType::String && s.len() as u64 == n,
        TensorData::Absent => false,
    }
}

/// Appends `dense<TYPE: [elements]>`, or `dense<TYPE>` when the data is absent. Data that
/// disagrees with the type (a kiln bug) prints as a marker the parser rejects.
pub(super) fn write_dense(out: &mut String, t: &Tensor) {
    out.push_str("dense<");
    write_shape(out, t.dtype, &t.shape);
    match &t.data {
        TensorData::Absent => {}
        _ if !well_formed(t) => {
            let _ = write!(out, ": <malformed data, {} bytes>", t.byte_len());
        }
        TensorData::Strings(strings) => {
            out.push_str(": [");
            for (i, s) in strings.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_quoted(out, s);
            }
            out.push(']');
        }
        TensorData::Raw(raw) => {
            out.push_str(": [");
            let n = t.numel().unwrap_or(0) as usize;
            let width = t.dtype.bits();
            for i in 0..n {
                if i > 0 {
                    out.push_str(", ");
                }
                if t.dtype.kind() == DTypeKind::Complex {
                    let (part, half) = if t.dtype == DType::C64 { (DType::F32, 32) } else { (DType::F64, 64) };
                    out.push('(');
                    write_element(out, part, read_bits(raw, 2 * i, half));
                    out.push_str(", ");
                    write_element(out, part, read_bits(raw, 2 * i + 1, half));
                    out.push(')');
                } else {
                    write_element(out, t.dtype, read_bits(raw, i, width));
                }
            }
            out.push(']');
        }
    }
    out.push('>');
}

/// Element `i` of packed little-endian storage with `width`-bit elements (`width` ≤ 64).
fn read_bits(raw: &[u8], i: usize, width: u32) -> u64 {
    if width >= 8 {
        let w = (width / 8) as usize;
        let mut b = [0u8; 8];
        b[..w].copy_from_slice(&raw[i * w..(i + 1) * w]);
        u64::from_le_bytes(b)
    } else {
        let bit = i * width as usize;
        u64::from(raw[bit / 8] >> (bit % 8)) & mask(width)
    }
}

/// Appends element `i` of packed storage (elements arrive in order).
fn push_bits(out: &mut Vec<u8>, i: usize, width: u32, bits: u64) {
    if width >= 8 {
        out.extend_from_slice(&bits.to_le_bytes()[..(width / 8) as usize]);
    } else {
        let bit = i * width as usize;
        if bit.is_multiple_of(8) {
            out.push(0);
        }
        if let Some(last) = out.last_mut() {
            *last |= (bits as u8) << (bit % 8);
        }
    }
}

fn mask(width: u32) -> u64 {
    if width >= 64 { u64::MAX } else { (1 << width) - 1 }
}

fn write_element(out: &mut String, dtype: DType, bits: u64) {
    let width = dtype.bits();
    let _ = match dtype {
        DType::F32 => write_float(out, f32::from_bits(bits as u32), f32::NAN.to_bits() == bits as u32, bits, 8),
        DType::F64 => write_float(out, f64::from_bits(bits), f64::NAN.to_bits() == bits, bits, 16),
        DType::Bool if bits <= 1 => write!(out, "{}", bits == 1),
        _ => match dtype.kind() {
            DTypeKind::Signed => write!(out, "{}", ((bits << (64 - width)) as i64) >> (64 - width)),
            DTypeKind::Float => write!(out, "0x{bits:0digits$x}", digits = width.div_ceil(4) as usize),
            _ => write!(out, "{bits}"),
        },
    };
}

fn write_float<F: std::fmt::Debug + Into<f64> + Copy>(out: &mut String, f: F, canonical_nan: bool, bits: u64, digits: usize) -> std::fmt::Result {
    let v: f64 = f.into();
    match () {
        _ if v.is_nan() && canonical_nan => write!(out, "nan"),
        _ if v.is_nan() => write!(out, "0x{bits:0digits$x}"),
        _ if v == f64::INFINITY => write!(out, "inf"),
        _ if v == f64::NEG_INFINITY => write!(out, "-inf"),
        _ => write!(out, "{f:?}"),
    }
}

/// Appends an attribute value. NaN attributes print as `nan` whatever their sign and payload.
pub(super) fn write_attr(out: &mut String, v: &AttrValue) {
    fn list<T>(out: &mut String, items: &[T], each: impl Fn(&mut String, &T)) {
        out.push('[');
        for (i, x) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            each(out, x);
        }
        out.push(']');
    }
    let float = |out: &mut String, f: &f32| {
        let _ = write_float(out, *f, true, 0, 0);
    };
    match v {
        AttrValue::Int(i) => {
            let _ = write!(out, "{i}");
        }
        AttrValue::Float(f) => float(out, f),
        AttrValue::Str(s) => write_quoted(out, s.as_bytes()),
        AttrValue::Ints(v) => list(out, v, |out, i| {
            let _ = write!(out, "{i}");
        }),
        AttrValue::Floats(v) => list(out, v, float),
        AttrValue::Strs(v) => list(out, v, |out, s| write_quoted(out, s.as_bytes())),
        AttrValue::Tensor(t) => write_dense(out, t),
        AttrValue::DType(d) => out.push_str(d.name()),
    }
}

impl Parser<'_> {
    /// `DTYPE[DIMS]`.
    pub(super) fn tensor_type(&mut self) -> PResult<TensorType> {
        let at = self.start;
        let dtype = match self.tok {
            Tok::Ident(name) => DType::from_name(name).ok_or_else(|| self.failure(at, format!("unknown element type `{name}`")))?,
            _ => return self.unexpected("an element type such as `f32`"),
        };
        self.bump();
        let shape = self.dims()?;
        Ok(TensorType { dtype, shape })
    }

    /// A type whose dims must all be known (constants).
    fn known_type(&mut self) -> PResult<(DType, Vec<u64>)> {
        let at = self.start;
        let ty = self.tensor_type()?;
        match ty.known_dims() {
            Some(dims) => Ok((ty.dtype, dims)),
            None => self.fail(at, format!("constant type `{ty:?}` has symbolic dims")),
        }
    }

    /// `[d, d, ...]`, cutting each dim out of the source for [`Dim::parse`].
    fn dims(&mut self) -> PResult<Vec<Dim>> {
        if self.tok != Tok::Punct(b'[') {
            return self.unexpected("`[`");
        }
        let s = self.src.as_bytes();
        let mut i = self.end;
        let mut dims = Vec::new();
        loop {
            while s.get(i).is_some_and(|&c| c == b' ' || c == b'\t') {
                i += 1;
            }
            if dims.is_empty() && s.get(i) == Some(&b']') {
                break;
            }
            let piece_start = i;
            let mut depth = 0usize;
            loop {
                match s.get(i) {
                    None | Some(b'\n') => return self.fail(i, "unterminated shape: expected `]`"),
                    Some(b',' | b']') if depth == 0 => break,
                    Some(b'(') if depth == MAX_DIM_NESTING => return self.fail(i, "dim nested too deeply"),
                    Some(b'(') => depth += 1,
                    Some(b')') => depth = depth.saturating_sub(1),
                    Some(b'"') => {
                        let (tok, end) = lex(self.src, i);
                        if let Tok::Bad(e) = tok {
                            return self.fail(e.at, e.message);
                        }
                        i = end;
                        continue;
                    }
                    Some(_) => {}
                }
                i += 1;
            }
            let piece = self.src[piece_start..i].trim_end();
            dims.push(self.dim(piece, piece_start)?);
            if s[i] == b']' {
                break;
            }
            i += 1;
        }
        self.end = i + 1;
        self.bump();
        Ok(dims)
    }

    fn dim(&self, piece: &str, at: usize) -> PResult<Dim> {
        if piece.starts_with('"') {
            let (tok, end) = lex(self.src, at);
            return match tok {
                Tok::Str(name) if end == at + piece.len() && !name.is_empty() => match String::from_utf8(name) {
                    Ok(name) => Ok(Dim::sym(&name)),
                    Err(_) => self.fail(at, "dim symbol is not UTF-8"),
                },
                _ => self.fail(at, "expected one quoted symbol"),
            };
        }
        if piece.is_empty() {
            return self.fail(at, "expected a dim");
        }
        Dim::parse(piece).map_err(|msg| self.failure(at, msg))
    }

    /// `dense<TYPE: [elements]>` or `dense<TYPE>` (data absent); the current token is `dense`.
    pub(super) fn dense(&mut self) -> PResult<Tensor> {
        self.expect_keyword("dense")?;
        self.expect(b'<')?;
        let type_at = self.start;
        let (dtype, shape) = self.known_type()?;
        let mut t = Tensor { dtype, shape, data: TensorData::Absent };
        if self.eat(b':') {
            let Some(numel) = t.numel() else {
                return self.fail(type_at, "element count overflows");
            };
            self.expect(b'[')?;
            let mut count = 0u64;
            let mut raw = Vec::new();
            let mut strings = Vec::new();
            while self.tok != Tok::Punct(b']') {
                if count > 0 {
                    self.expect(b',')?;
                }
                if dtype == DType::String {
                    strings.push(Bytes::from(self.string()?));
                } else if dtype.kind() == DTypeKind::Complex {
                    let (part, half) = if dtype == DType::C64 { (DType::F32, 32) } else { (DType::F64, 64) };
                    self.expect(b'(')?;
                    let re = self.element(part)?;
                    self.expect(b',')?;
                    let im = self.element(part)?;
                    self.expect(b')')?;
                    push_bits(&mut raw, 0, half, re);
                    push_bits(&mut raw, 0, half, im);
                } else {
                    let bits = self.element(dtype)?;
                    push_bits(&mut raw, count as usize, dtype.bits(), bits);
                }
                count += 1;
            }
            if count != numel {
                return self.fail(self.start, format!("expected {numel} elements for `{:?}`, found {count}", t.ty()));
            }
            self.bump();
            t.data = if dtype == DType::String { TensorData::Strings(strings) } else { TensorData::Raw(Bytes::from(raw)) };
        }
        self.expect(b'>')?;
        Ok(t)
    }

    /// One element's bits; consumes it.
    fn element(&mut self, dtype: DType) -> PResult<u64> {
        let at = self.start;
        let width = dtype.bits();
        let out_of_range = |s: &str| format!("`{s}` is out of range for `{dtype}`");
        let bits = match (&self.tok, dtype.kind()) {
            (Tok::Hex(h), DTypeKind::Float) => match u64::from_str_radix(h, 16) {
                Ok(b) if b <= mask(width) => b,
                _ => return self.fail(at, format!("`0x{h}` does not fit {width} bits")),
            },
            (_, DTypeKind::Float) if dtype == DType::F32 => return self.float_lit::<f32>().map(|f| u64::from(f.to_bits())),
            (_, DTypeKind::Float) if dtype == DType::F64 => return self.float_lit::<f64>().map(f64::to_bits),
            (_, DTypeKind::Float) => return self.unexpected(&format!("hex bits such as `0x3c00` for a `{dtype}` element")),
            (Tok::Ident("true"), DTypeKind::Bool) => 1,
            (Tok::Ident("false"), DTypeKind::Bool) => 0,
            (Tok::Int(s), DTypeKind::Signed) => match s.parse::<i64>() {
                Ok(v) if width == 64 || (-(1i64 << (width - 1))..1i64 << (width - 1)).contains(&v) => v as u64 & mask(width),
                _ => return self.fail(at, out_of_range(s)),
            },
            (Tok::Int(s), DTypeKind::Unsigned | DTypeKind::Bool) => match s.parse::<u64>() {
                Ok(v) if v <= mask(width) => v,
                _ => return self.fail(at, out_of_range(s)),
            },
            (_, DTypeKind::Bool) => return self.unexpected("`true` or `false`"),
            _ => return self.unexpected(&format!("an integer for a `{dtype}` element")),
        };
        self.bump();
        Ok(bits)
    }

    /// A float literal: a decimal number, `nan`, `inf` or `-inf`; consumes it.
    fn float_lit<F: std::str::FromStr>(&mut self) -> PResult<F> {
        let text = match self.tok {
            Tok::Float(s) | Tok::Int(s) => s,
            Tok::Ident(s @ ("nan" | "inf")) => s,
            _ => return self.unexpected("a float"),
        };
        match text.parse::<F>() {
            Ok(f) => {
                self.bump();
                Ok(f)
            }
            Err(_) => self.fail(self.start, format!("bad float `{text}`")),
        }
    }

    /// An attribute value.
    pub(super) fn attr_value(&mut self) -> PResult<AttrValue> {
        let at = self.start;
        match self.tok {
            Tok::Int(s) => {
                let v = s.parse::<i64>().map_err(|_| self.failure(at, format!("`{s}` does not fit i64")))?;
                self.bump();
                Ok(AttrValue::Int(v))
            }
            Tok::Float(_) | Tok::Ident("nan" | "inf") => self.float_lit().map(AttrValue::Float),
            Tok::Str(_) => self.text().map(AttrValue::Str),
            Tok::Punct(b'[') => self.attr_list(),
            Tok::Ident("dense") => self.dense().map(AttrValue::Tensor),
            Tok::Ident(name) => match DType::from_name(name) {
                Some(d) => {
                    self.bump();
                    Ok(AttrValue::DType(d))
                }
                None => self.fail(at, format!("`{name}` is not an attribute value")),
            },
            _ => self.unexpected("an attribute value"),
        }
    }

    /// `[]` (an empty `Ints`), `[1, 2]`, `[1.0, 2.5]` or `["a", "b"]`; the first element
    /// decides the kind.
    fn attr_list(&mut self) -> PResult<AttrValue> {
        self.expect(b'[')?;
        let mut out = match self.tok {
            Tok::Punct(b']') => AttrValue::Ints(Vec::new()),
            Tok::Int(_) => AttrValue::Ints(Vec::new()),
            Tok::Float(_) | Tok::Ident("nan" | "inf") => AttrValue::Floats(Vec::new()),
            Tok::Str(_) => AttrValue::Strs(Vec::new()),
            _ => return self.unexpected("a list element"),
        };
        let mut first = true;
        while !self.eat(b']') {
            if !first {
                self.expect(b',')?;
            }
            first = false;
            match &mut out {
                AttrValue::Ints(v) => match self.tok {
                    Tok::Int(s) => {
                        v.push(s.parse().map_err(|_| self.failure(self.start, format!("`{s}` does not fit i64")))?);
                        self.bump();
                    }
                    _ => return self.unexpected("an integer (the list started with one)"),
                },
                AttrValue::Floats(v) => match self.tok {
                    Tok::Float(_) | Tok::Ident("nan" | "inf") => v.push(self.float_lit()?),
                    _ => return self.unexpected("a float (the list started with one)"),
                },
                AttrValue::Strs(v) => match self.tok {
                    Tok::Str(_) => v.push(self.text()?),
                    _ => return self.unexpected("a string (the list started with one)"),
                },
                // Not reached: the list kind is one of the three above.
                _ => return self.unexpected("a list element"),
            }
        }
        Ok(out)
    }

    /// `weight "NAME" : TYPE bytes N` after `weight`; `bytes N` is absent for string tensors.
    pub(super) fn weight_ref(&mut self) -> PResult<(String, Tensor)> {
        let name = self.text()?;
        self.expect(b':')?;
        let type_at = self.start;
        let (dtype, shape) = self.known_type()?;
        let t = Tensor { dtype, shape, data: TensorData::Absent };
        if dtype == DType::String {
            return Ok((name, t));
        }
        let Some(want) = t.numel().and_then(|n| dtype.storage_bytes(n)) else {
            return self.fail(type_at, "weight size overflows");
        };
        self.expect_keyword("bytes")?;
        let at = self.start;
        match self.tok {
            Tok::Int(s) if s.parse::<u64>() == Ok(want) => {
                self.bump();
                Ok((name, t))
            }
            Tok::Int(s) => self.fail(at, format!("weight `{:?}` takes {want} bytes, not {s}", t.ty())),
            _ => self.unexpected("a byte count"),
        }
    }
}
