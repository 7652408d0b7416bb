//! The evaluator's working array: a shape and elements widened to one of four element kinds.
//!
//! Floats of every width compute in `f64` and round once to their dtype when the result is
//! encoded; integers of every width (u64 included) compute in `i128` and wrap to their dtype's
//! width on encoding. Decoding and encoding follow ONNX `raw_data` layout.

use bytes::Bytes;
use kiln_tir::dtype::DTypeKind;
use kiln_tir::op::RoundMode;
use kiln_tir::{DType, Tensor, TensorData};

use crate::error::{EvalError, Result, invalid, unsupported};
use crate::minifloat::{self, MiniFloat};

/// Largest element count the evaluator will materialize.
pub(crate) const MAX_ELEMENTS: usize = 1 << 30;

/// Elements in their computing representation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Buf {
    /// Floating-point elements of any width.
    F(Vec<f64>),
    /// Integer elements of any width and signedness.
    I(Vec<i128>),
    /// Booleans.
    B(Vec<bool>),
    /// Byte strings.
    S(Vec<Bytes>),
}

/// Applies `$body` to the vector inside a [`Buf`] whatever its kind, rewrapping the result.
macro_rules! map_buf {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            $crate::array::Buf::F($v) => $crate::array::Buf::F($body),
            $crate::array::Buf::I($v) => $crate::array::Buf::I($body),
            $crate::array::Buf::B($v) => $crate::array::Buf::B($body),
            $crate::array::Buf::S($v) => $crate::array::Buf::S($body),
        }
    };
}

impl Buf {
    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            Buf::F(v) => v.len(),
            Buf::I(v) => v.len(),
            Buf::B(v) => v.len(),
            Buf::S(v) => v.len(),
        }
    }

    /// The elements at `idx`, in order. An index past the end is a kiln bug, reported as an
    /// error rather than a panic.
    pub(crate) fn take(&self, op: &'static str, idx: &[usize]) -> Result<Buf> {
        fn pick<T: Clone>(op: &'static str, v: &[T], idx: &[usize]) -> Result<Vec<T>> {
            let mut out = Vec::with_capacity(idx.len());
            let mut k = 0;
            while k < idx.len() {
                let i = idx[k];
                if i >= v.len() {
                    return Err(internal(op, "element index out of bounds"));
                }
                out.push(v[i].clone());
                k += 1;
            }
            Ok(out)
        }
        Ok(match self {
            Buf::F(v) => Buf::F(pick(op, v, idx)?),
            Buf::I(v) => Buf::I(pick(op, v, idx)?),
            Buf::B(v) => Buf::B(pick(op, v, idx)?),
            Buf::S(v) => Buf::S(pick(op, v, idx)?),
        })
    }

    /// An empty buffer of the same kind.
    pub(crate) fn empty_like(&self) -> Buf {
        map_buf!(self, _v => Vec::new())
    }

    /// Appends `src[range]`; `src` must be of the same kind.
    pub(crate) fn extend_range(&mut self, op: &'static str, src: &Buf, range: std::ops::Range<usize>) -> Result<()> {
        fn ext<T: Clone>(op: &'static str, dst: &mut Vec<T>, src: &[T], range: std::ops::Range<usize>) -> Result<()> {
            let part = src.get(range).ok_or_else(|| internal(op, "range out of bounds"))?;
            dst.extend_from_slice(part);
            Ok(())
        }
        match (self, src) {
            (Buf::F(d), Buf::F(s)) => ext(op, d, s, range),
            (Buf::I(d), Buf::I(s)) => ext(op, d, s, range),
            (Buf::B(d), Buf::B(s)) => ext(op, d, s, range),
            (Buf::S(d), Buf::S(s)) => ext(op, d, s, range),
            _ => Err(internal(op, "mixed element kinds")),
        }
    }
}

/// `f` of each element.
///
/// The hot loops of this crate are plain `while` loops over indices: the crate is built
/// without optimizations in test builds, where each step of an iterator adapter costs a
/// function call but indexing is inline.
pub(crate) fn map_vec<T: Copy, U: Clone + Default>(v: &[T], f: impl Fn(T) -> U) -> Vec<U> {
    let mut out = vec![U::default(); v.len()];
    let mut i = 0;
    while i < v.len() {
        out[i] = f(v[i]);
        i += 1;
    }
    out
}

/// `f` of each pair of elements at the same position (over the shorter length).
pub(crate) fn zip_vec<T: Copy, S: Copy, U: Clone + Default>(a: &[T], b: &[S], f: impl Fn(T, S) -> U) -> Vec<U> {
    let n = a.len().min(b.len());
    let mut out = vec![U::default(); n];
    let mut i = 0;
    while i < n {
        out[i] = f(a[i], b[i]);
        i += 1;
    }
    out
}

/// An [`EvalError::Internal`]: a kiln bug rather than bad input.
pub(crate) fn internal(op: &'static str, what: &str) -> EvalError {
    EvalError::Internal { op, reason: what.to_string() }
}

/// A tensor being computed on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Arr {
    /// The element type it will be encoded as.
    pub dtype: DType,
    /// Dims.
    pub shape: Vec<usize>,
    /// Elements, row-major.
    pub buf: Buf,
}

/// Product of `shape`, or an error if it overflows or exceeds [`MAX_ELEMENTS`].
pub(crate) fn numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    match n {
        Some(n) if n <= MAX_ELEMENTS => Ok(n),
        _ => Err(unsupported(op, format!("tensor of shape {shape:?} is too large to evaluate"))),
    }
}

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Normalizes a possibly negative axis against `rank`.
pub(crate) fn norm_axis(op: &'static str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) { Ok(a as usize) } else { Err(invalid(op, format!("axis {axis} is out of range for rank {rank}"))) }
}

/// Wraps an integer to the range of `dtype` (two's complement for signed types).
pub(crate) fn wrap_int(v: i128, dtype: DType) -> i128 {
    let bits = dtype.bits();
    if dtype.kind() == DTypeKind::Bool {
        return i128::from(v != 0);
    }
    if !(1..=64).contains(&bits) {
        return v;
    }
    let low = (v as u128) & ((1u128 << bits) - 1);
    if dtype.kind() == DTypeKind::Signed && (low >> (bits - 1)) & 1 == 1 { low as i128 - (1i128 << bits) } else { low as i128 }
}

/// The narrow float format of `dtype`, if it is one.
pub(crate) fn minifloat_of(dtype: DType) -> Option<MiniFloat> {
    Some(match dtype {
        DType::F16 => minifloat::F16,
        DType::BF16 => minifloat::BF16,
        DType::F8E4M3FN => minifloat::E4M3FN,
        DType::F8E4M3FNUZ => minifloat::E4M3FNUZ,
        DType::F8E5M2 => minifloat::E5M2,
        DType::F8E5M2FNUZ => minifloat::E5M2FNUZ,
        DType::F4E2M1 => minifloat::E2M1,
        DType::F6E2M3 => minifloat::E2M3,
        DType::F6E3M2 => minifloat::E3M2,
        _ => return None,
    })
}

/// Reads `width`-byte little-endian integers.
fn read_ints(raw: &[u8], width: usize, signed: bool) -> Vec<i128> {
    raw.chunks_exact(width)
        .map(|c| {
            let mut b = [0u8; 16];
            b[..width].copy_from_slice(c);
            if signed && c[width - 1] & 0x80 != 0 {
                b[width..].fill(0xff);
            }
            i128::from_le_bytes(b)
        })
        .collect()
}

/// Reads `n` fields of `bits` bits (2, 4 or 6) from a little-endian bit stream: field `i`
/// occupies bits `i * bits .. (i + 1) * bits`, low bits first.
fn read_packed(raw: &[u8], n: usize, bits: usize) -> Vec<u32> {
    let mask = (1u32 << bits) - 1;
    (0..n)
        .map(|i| {
            let (byte, shift) = ((i * bits) / 8, (i * bits) % 8);
            let lo = u32::from(raw.get(byte).copied().unwrap_or(0));
            let hi = u32::from(raw.get(byte + 1).copied().unwrap_or(0));
            ((lo | (hi << 8)) >> shift) & mask
        })
        .collect()
}

/// Writes fields of `bits` bits as [`read_packed`] reads them.
fn write_packed(codes: impl Iterator<Item = u32>, n: usize, bits: usize) -> Vec<u8> {
    let mut out = vec![0u8; (n * bits).div_ceil(8)];
    let mask = (1u32 << bits) - 1;
    for (i, c) in codes.enumerate() {
        let (byte, shift) = ((i * bits) / 8, (i * bits) % 8);
        let v = (c & mask) << shift;
        if let Some(b) = out.get_mut(byte) {
            *b |= v as u8;
        }
        if let Some(b) = out.get_mut(byte + 1) {
            *b |= (v >> 8) as u8;
        }
    }
    out
}

/// Sign-extends a `bits`-wide field.
fn sign_extend(code: u32, bits: usize) -> i128 {
    let v = i128::from(code);
    if (code >> (bits - 1)) & 1 == 1 { v - (1i128 << bits) } else { v }
}

impl Arr {
    /// A float array.
    pub(crate) fn floats(dtype: DType, shape: Vec<usize>, v: Vec<f64>) -> Arr {
        Arr { dtype, shape, buf: Buf::F(v) }
    }

    /// An integer array.
    pub(crate) fn ints(dtype: DType, shape: Vec<usize>, v: Vec<i128>) -> Arr {
        Arr { dtype, shape, buf: Buf::I(v) }
    }

    /// A bool array.
    pub(crate) fn bools(shape: Vec<usize>, v: Vec<bool>) -> Arr {
        Arr { dtype: DType::Bool, shape, buf: Buf::B(v) }
    }

    /// An `i64` array.
    pub(crate) fn i64s(shape: Vec<usize>, v: impl IntoIterator<Item = i64>) -> Arr {
        Arr::ints(DType::I64, shape, v.into_iter().map(i128::from).collect())
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// The same elements under another shape.
    pub(crate) fn with_shape(self, shape: Vec<usize>) -> Arr {
        Arr { shape, ..self }
    }

    /// The elements at `idx` as an array of `shape`.
    pub(crate) fn take(&self, op: &'static str, idx: &[usize], shape: Vec<usize>) -> Result<Arr> {
        Ok(Arr { dtype: self.dtype, shape, buf: self.buf.take(op, idx)? })
    }

    /// The float elements, or an error naming the dtype if the array is not float.
    pub(crate) fn f(&self, op: &'static str) -> Result<&[f64]> {
        match &self.buf {
            Buf::F(v) => Ok(v),
            _ => Err(unsupported(op, format!("element type {} (expected a float type)", self.dtype))),
        }
    }

    /// The integer elements, or an error if the array is not of an integer type.
    pub(crate) fn i(&self, op: &'static str) -> Result<&[i128]> {
        match &self.buf {
            Buf::I(v) => Ok(v),
            _ => Err(invalid(op, format!("element type {} (expected an integer type)", self.dtype))),
        }
    }

    /// The integer elements as `i64`, for index-like inputs (shapes, axes, indices).
    pub(crate) fn as_i64s(&self, op: &'static str) -> Result<Vec<i64>> {
        self.i(op)?
            .iter()
            .map(|&v| i64::try_from(v).map_err(|_| invalid(op, format!("index value {v} does not fit i64"))))
            .collect()
    }

    /// The elements converted to `f64` (floats, integers and bools).
    pub(crate) fn to_f64s(&self, op: &'static str) -> Result<Vec<f64>> {
        Ok(match &self.buf {
            Buf::F(v) => v.clone(),
            Buf::I(v) => v.iter().map(|&x| x as f64).collect(),
            Buf::B(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
            Buf::S(_) => return Err(unsupported(op, "string elements")),
        })
    }

    /// The bool elements.
    pub(crate) fn b(&self, op: &'static str) -> Result<&[bool]> {
        match &self.buf {
            Buf::B(v) => Ok(v),
            _ => Err(invalid(op, format!("element type {} (expected bool)", self.dtype))),
        }
    }

    /// Decodes a tensor.
    pub(crate) fn from_tensor(op: &'static str, t: &Tensor) -> Result<Arr> {
        let shape: Vec<usize> = t
            .shape
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| unsupported(op, format!("dim {d} does not fit usize"))))
            .collect::<Result<_>>()?;
        let n = numel(op, &shape)?;
        let raw = match &t.data {
            TensorData::Raw(b) => b,
            TensorData::Strings(s) => {
                if t.dtype != DType::String || s.len() != n {
                    return Err(invalid(op, format!("string tensor holds {} elements for shape {shape:?}", s.len())));
                }
                return Ok(Arr { dtype: DType::String, shape, buf: Buf::S(s.clone()) });
            }
            TensorData::Absent => return Err(EvalError::MissingData { value: format!("input of {op}") }),
        };
        let expect = t.dtype.storage_bytes(n as u64).ok_or_else(|| invalid(op, "string tensor without strings"))?;
        if raw.len() as u64 != expect {
            return Err(invalid(op, format!("{} tensor of shape {shape:?} needs {expect} bytes, has {}", t.dtype, raw.len())));
        }
        let dtype = t.dtype;
        let buf = match dtype {
            DType::F32 => {
                let mut v = vec![0.0; n];
                let mut i = 0;
                while i < n {
                    let b = 4 * i;
                    v[i] = f32::from_bits(raw[b] as u32 | (raw[b + 1] as u32) << 8 | (raw[b + 2] as u32) << 16 | (raw[b + 3] as u32) << 24) as f64;
                    i += 1;
                }
                Buf::F(v)
            }
            DType::F64 => Buf::F(raw.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect()),
            DType::F16 | DType::BF16 => {
                let fmt = minifloat_of(dtype).ok_or_else(|| internal(op, "no format"))?;
                Buf::F(raw.chunks_exact(2).map(|c| fmt.decode(u32::from(u16::from_le_bytes([c[0], c[1]])))).collect())
            }
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => {
                let fmt = minifloat_of(dtype).ok_or_else(|| internal(op, "no format"))?;
                Buf::F(raw.iter().map(|&b| fmt.decode(u32::from(b))).collect())
            }
            DType::F4E2M1 | DType::F6E2M3 | DType::F6E3M2 => {
                let fmt = minifloat_of(dtype).ok_or_else(|| internal(op, "no format"))?;
                Buf::F(read_packed(raw, n, dtype.bits() as usize).into_iter().map(|c| fmt.decode(c)).collect())
            }
            DType::F8E8M0 => Buf::F(raw.iter().map(|&b| minifloat::e8m0_decode(b)).collect()),
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => Buf::I(read_ints(raw, (dtype.bits() / 8) as usize, true)),
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => Buf::I(read_ints(raw, (dtype.bits() / 8) as usize, false)),
            DType::I4 | DType::I2 => {
                let bits = dtype.bits() as usize;
                Buf::I(read_packed(raw, n, bits).into_iter().map(|c| sign_extend(c, bits)).collect())
            }
            DType::U4 | DType::U2 => Buf::I(read_packed(raw, n, dtype.bits() as usize).into_iter().map(i128::from).collect()),
            DType::Bool => Buf::B(raw.iter().map(|&b| b != 0).collect()),
            DType::String | DType::C64 | DType::C128 => return Err(unsupported(op, format!("element type {dtype}"))),
        };
        Ok(Arr { dtype, shape, buf })
    }

    /// Encodes the array as a tensor of its dtype: integers wrap; floats round to nearest even
/// without saturation (Cast applies its saturation rules before this).
    pub(crate) fn into_tensor(self, op: &'static str) -> Result<Tensor> {
        let dtype = self.dtype;
        let shape: Vec<u64> = self.shape.iter().map(|&d| d as u64).collect();
        let n = self.buf.len();
        if numel(op, &self.shape)? != n {
            return Err(internal(op, "element count does not match the shape"));
        }
        let bytes: Vec<u8> = match (&self.buf, dtype.kind()) {
            (Buf::S(s), DTypeKind::String) => return Ok(Tensor { dtype, shape, data: TensorData::Strings(s.clone()) }),
            (Buf::F(v), DTypeKind::Float) => match dtype {
                DType::F32 => {
                    let mut out = vec![0u8; 4 * n];
                    let mut i = 0;
                    while i < n {
                        let (b, bits) = (4 * i, (v[i] as f32).to_bits());
                        out[b] = bits as u8;
                        out[b + 1] = (bits >> 8) as u8;
                        out[b + 2] = (bits >> 16) as u8;
                        out[b + 3] = (bits >> 24) as u8;
                        i += 1;
                    }
                    out
                }
                DType::F64 => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
                // Cast has already rounded e8m0 results to powers of two, which truncation keeps.
                DType::F8E8M0 => v.iter().map(|&x| minifloat::e8m0_encode(x, true, RoundMode::Down)).collect(),
                DType::F4E2M1 | DType::F6E2M3 | DType::F6E3M2 => {
                    let fmt = minifloat_of(dtype).ok_or_else(|| internal(op, "no format"))?;
                    write_packed(v.iter().map(|&x| fmt.encode(x, false)), n, dtype.bits() as usize)
                }
                DType::F16 | DType::BF16 => {
                    let fmt = minifloat_of(dtype).ok_or_else(|| internal(op, "no format"))?;
                    v.iter().flat_map(|&x| (fmt.encode(x, false) as u16).to_le_bytes()).collect()
                }
                _ => {
                    let fmt = minifloat_of(dtype).ok_or_else(|| internal(op, "no format"))?;
                    v.iter().map(|&x| fmt.encode(x, false) as u8).collect()
                }
            },
            (Buf::I(v), DTypeKind::Signed | DTypeKind::Unsigned) => {
                let bits = dtype.bits() as usize;
                if bits < 8 {
                    write_packed(v.iter().map(|&x| wrap_int(x, dtype) as u32), n, bits)
                } else {
                    let width = bits / 8;
                    v.iter().flat_map(|&x| wrap_int(x, dtype).to_le_bytes().into_iter().take(width)).collect()
                }
            }
            (Buf::B(v), DTypeKind::Bool) => v.iter().map(|&b| u8::from(b)).collect(),
            _ => return Err(internal(op, &format!("{dtype} result held in the wrong element kind"))),
        };
        Ok(Tensor { dtype, shape, data: TensorData::Raw(Bytes::from(bytes)) })
    }
}

/// Source offsets of every element of an array of `shape` walked row-major, where moving one
/// step along axis `d` moves `steps[d]` elements in the source, starting at `base`.
///
/// Transpose, slice, broadcast and expand are all this walk with different steps.
pub(crate) fn walk(shape: &[usize], steps: &[isize], base: isize) -> Vec<usize> {
    offsets(shape, steps, base).map(|o| o as usize).collect()
}

/// The offsets [`walk`] collects, one at a time.
pub(crate) fn offsets<'a>(shape: &'a [usize], steps: &'a [isize], base: isize) -> impl Iterator<Item = isize> + 'a {
    let n: usize = shape.iter().product();
    let mut counter = vec![0usize; shape.len()];
    let mut off = base;
    (0..n).map(move |_| {
        let at = off;
        // Odometer step: bump the last axis, carrying into earlier ones.
        let mut d = shape.len();
        while d > 0 {
            d -= 1;
            counter[d] += 1;
            off += steps[d];
            if counter[d] < shape[d] {
                break;
            }
            off -= steps[d] * shape[d] as isize;
            counter[d] = 0;
        }
        at
    })
}

/// The shape both `a` and `b` broadcast to (numpy rules).
pub(crate) fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(invalid(op, format!("shapes {a:?} and {b:?} do not broadcast"))),
        };
    }
    Ok(out)
}

/// For each element of `out` (row-major), the offset of the element of an array of shape
/// `shape` that broadcasts to it. `shape` must broadcast to `out`.
pub(crate) fn broadcast_index(op: &'static str, shape: &[usize], out: &[usize]) -> Result<Vec<usize>> {
    if shape.len() > out.len() {
        return Err(invalid(op, format!("shape {shape:?} does not broadcast to {out:?}")));
    }
    let lead = out.len() - shape.len();
    let st = strides(shape);
    let mut steps = vec![0isize; out.len()];
    for (i, &d) in shape.iter().enumerate() {
        if d == out[lead + i] {
            steps[lead + i] = st[i] as isize;
        } else if d != 1 {
            return Err(invalid(op, format!("shape {shape:?} does not broadcast to {out:?}")));
        }
    }
    Ok(walk(out, &steps, 0))
}

/// `arr` broadcast to `out` (a copy; identity when the shapes are equal).
pub(crate) fn broadcast_to(op: &'static str, arr: &Arr, out: &[usize]) -> Result<Arr> {
    if arr.shape == out {
        return Ok(arr.clone());
    }
    let idx = broadcast_index(op, &arr.shape, out)?;
    arr.take(op, &idx, out.to_vec())
}

/// Truncates a float toward zero for conversion to an integer type. Values no integer type
/// holds (NaN, infinities, beyond 64 bits) give `i64::MIN`, as x86 conversions do; the
/// result is wrapped to the target width on encoding.
pub(crate) fn float_to_int(v: f64) -> i128 {
    let t = v.trunc();
    let (lo, hi) = (-(2f64.powi(63)), 2f64.powi(64));
    if t.is_finite() && t > lo && t < hi { t as i128 } else { i128::from(i64::MIN) }
}
