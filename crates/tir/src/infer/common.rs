//! What every op family uses: the inference context, accepted type sets, axis handling,
//! checked dim arithmetic, broadcasting and decoding of constant inputs.

use crate::dim::Dim;
use crate::graph::Assumed;
use crate::dtype::{DType, DTypeKind};
use crate::tensor::Tensor;
use crate::types::TensorType;

use super::{InferError, InferInput, RegionSig, SymbolSource};

/// Results of this module's functions.
pub(super) type Res<T> = Result<T, InferError>;

/// One node's inputs, regions and output count, and the source of fresh symbols.
pub(super) struct Cx<'a, 'i> {
    inputs: &'a [Option<InferInput<'i>>],
    /// Signatures of the node's regions.
    pub regions: &'a [RegionSig],
    /// How many outputs the node has.
    pub num_outputs: usize,
    symbols: &'a mut dyn SymbolSource,
}

impl<'a, 'i> Cx<'a, 'i> {
    pub fn new(inputs: &'a [Option<InferInput<'i>>], regions: &'a [RegionSig], num_outputs: usize, symbols: &'a mut dyn SymbolSource) -> Self {
        Cx { inputs, regions, num_outputs, symbols }
    }

    /// Checks the input count is within `min..=max` and the first `min` inputs are present.
    pub fn arity(&self, min: usize, max: usize) -> Res<()> {
        self.positions(min, max)?;
        for i in 0..min {
            self.ty(i)?;
        }
        Ok(())
    }

    /// Checks the number of input positions is within `min..=max` (any may be omitted).
    pub fn positions(&self, min: usize, max: usize) -> Res<()> {
        let n = self.inputs.len();
        if n < min || n > max {
            let expected = if min == max {
                min.to_string()
            } else if max == usize::MAX {
                format!("at least {min}")
            } else {
                format!("{min} to {max}")
            };
            return Err(InferError::Arity { what: "inputs", expected, found: n });
        }
        Ok(())
    }

    /// Number of input positions (omitted trailing inputs may or may not be counted).
    pub fn len(&self) -> usize {
        self.inputs.len()
    }

    fn input(&self, i: usize) -> Option<InferInput<'i>> {
        self.inputs.get(i).copied().flatten()
    }

    /// The type of required input `i`.
    pub fn ty(&self, i: usize) -> Res<&'i TensorType> {
        self.input(i).map(|x| x.ty).ok_or(InferError::MissingInput(i))
    }

    /// The type of optional input `i`, if present.
    pub fn opt(&self, i: usize) -> Option<&'i TensorType> {
        self.input(i).map(|x| x.ty)
    }

    /// The value of input `i`, if it is a constant.
    pub fn value(&self, i: usize) -> Option<&'i Tensor> {
        self.input(i).and_then(|x| x.value)
    }

    /// The elements of constant integer input `i`.
    pub fn ints(&self, i: usize) -> Option<Vec<i64>> {
        self.value(i).and_then(Tensor::to_i64s)
    }

    /// The elements of constant numeric input `i` as `f64`.
    pub fn floats(&self, i: usize) -> Option<Vec<f64>> {
        self.value(i).and_then(to_f64s)
    }

    /// The single element of constant integer input `i` (a scalar or a one-element tensor).
    pub fn int_scalar(&self, i: usize) -> Option<i64> {
        match self.ints(i)?[..] {
            [v] => Some(v),
            _ => None,
        }
    }

    /// A new symbol for a size known only at run time.
    pub fn fresh(&mut self) -> Dim {
        self.symbols.fresh()
    }

    /// Reports that inference goes on under `what`.
    pub fn assume(&mut self, what: Assumed) {
        self.symbols.assume(what);
    }

    /// Broadcasts one pair of dims: equal dims, or `1` against anything. Whether a symbol
    /// broadcasts with a different size is decided only once it is bound, so it is assumed
    /// (and the assumption reported): against a known size the result is that size, which it
    /// is whether the symbol turns out to be 1 or equal; two symbols give a fresh one. Two
    /// known sizes that differ and are not 1 do not broadcast: `None`.
    pub fn broadcast_dim(&mut self, a: &Dim, b: &Dim) -> Option<Dim> {
        if a == b || *b == Dim::Known(1) {
            return Some(a.clone());
        }
        if *a == Dim::Known(1) {
            return Some(b.clone());
        }
        let out = match (a, b) {
            (Dim::Known(_), Dim::Known(_)) => return None,
            (Dim::Known(_), Dim::Sym(_)) => a.clone(),
            (Dim::Sym(_), Dim::Known(_)) => b.clone(),
            (Dim::Sym(_), Dim::Sym(_)) => self.fresh(),
        };
        self.assume(Assumed::Broadcast(a.clone(), b.clone()));
        Some(out)
    }

    /// Multidirectional (numpy) broadcasting of several shapes.
    pub fn broadcast(&mut self, shapes: &[&[Dim]]) -> Res<Vec<Dim>> {
        let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut out = Vec::with_capacity(rank);
        for k in 0..rank {
            let mut acc: Option<Dim> = None;
            for s in shapes {
                let Some(i) = (k + s.len()).checked_sub(rank) else {
                    continue;
                };
                let d = &s[i];
                acc = Some(match acc {
                    None => d.clone(),
                    Some(a) => self.broadcast_dim(&a, d).ok_or_else(|| {
                        let all: Vec<String> = shapes.iter().map(|s| fmt_dims(s)).collect();
                        shape_err(format!("cannot broadcast dim {a} with {d} (shapes {})", all.join(", ")))
                    })?,
                });
            }
            out.push(acc.unwrap_or(Dim::Known(1)));
        }
        Ok(out)
    }

    /// Checks `from` broadcasts to `to` in one direction (`to` keeps its shape); a symbol on
    /// either side against a different size is assumed to fit, as in [`Cx::broadcast_dim`].
    pub fn broadcasts_to(&mut self, from: &[Dim], to: &[Dim], what: &str) -> Res<()> {
        let fail = || shape_err(format!("{what} of shape {} does not broadcast to {}", fmt_dims(from), fmt_dims(to)));
        if from.len() > to.len() {
            return Err(fail());
        }
        for (f, t) in from.iter().rev().zip(to.iter().rev()) {
            match (f, t) {
                _ if f == t || *f == Dim::Known(1) => {}
                (Dim::Known(_), Dim::Known(_)) => return Err(fail()),
                _ => self.assume(Assumed::Broadcast(f.clone(), t.clone())),
            }
        }
        Ok(())
    }

    /// `n` fresh dims.
    pub fn fresh_dims(&mut self, n: usize) -> Vec<Dim> {
        (0..n).map(|_| self.fresh()).collect()
    }

    /// Checks required input `i` has a type in `set` and returns its dtype.
    pub fn check(&self, i: usize, set: TypeSet) -> Res<DType> {
        let d = self.ty(i)?.dtype;
        set.check(i, d)?;
        Ok(d)
    }

    /// Checks optional input `i`, if present, has a type in `set`.
    pub fn check_opt(&self, i: usize, set: TypeSet) -> Res<Option<DType>> {
        match self.opt(i) {
            Some(t) => set.check(i, t.dtype).map(Some),
            None => Ok(None),
        }
    }

    /// Checks optional input `j`, if present, has the same dtype as input `i`.
    pub fn same(&self, i: usize, j: usize) -> Res<()> {
        let (Some(a), Some(b)) = (self.opt(i), self.opt(j)) else {
            return Ok(());
        };
        if a.dtype != b.dtype {
            return Err(InferError::DType { input: j, found: b.dtype, expected: format!("{} (the type of input {i})", a.dtype) });
        }
        Ok(())
    }

    /// Checks input `i`, if present, has rank `rank`.
    pub fn rank_is(&self, i: usize, rank: usize, name: &str) -> Res<()> {
        match self.opt(i) {
            Some(t) if t.rank() != rank => Err(shape_err(format!("input {i} (`{name}`) must have rank {rank}, found {t}"))),
            _ => Ok(()),
        }
    }

    /// Checks input `i`, if present, has rank at least `rank`.
    pub fn rank_at_least(&self, i: usize, rank: usize, name: &str) -> Res<()> {
        match self.opt(i) {
            Some(t) if t.rank() < rank => Err(shape_err(format!("input {i} (`{name}`) must have rank at least {rank}, found {t}"))),
            _ => Ok(()),
        }
    }

    /// Checks input `i`, if present, holds one element (rank 0, or rank 1 of size 1).
    pub fn scalar_like(&self, i: usize, name: &str) -> Res<()> {
        let Some(t) = self.opt(i) else {
            return Ok(());
        };
        let ok = match &t.shape[..] {
            [] => true,
            [d] => !matches!(d, Dim::Known(n) if *n != 1),
            _ => false,
        };
        if ok { Ok(()) } else { Err(shape_err(format!("input {i} (`{name}`) must be a scalar or a one-element 1-D tensor, found {t}"))) }
    }

    /// The length of 1-D input `i` (its only dim), checking the rank.
    pub fn vector_len(&self, i: usize, name: &str) -> Res<Dim> {
        let t = self.ty(i)?;
        match &t.shape[..] {
            [d] => Ok(d.clone()),
            _ => Err(shape_err(format!("input {i} (`{name}`) must be 1-D, found {t}"))),
        }
    }
}

/// A set of element types an op accepts at some input.
#[derive(Clone, Copy)]
pub(super) struct TypeSet {
    name: &'static str,
    types: Option<&'static [DType]>,
}

impl TypeSet {
    /// Checks `dtype` of input `input` belongs to the set.
    pub fn check(self, input: usize, dtype: DType) -> Res<DType> {
        match self.types {
            Some(types) if !types.contains(&dtype) => {
                // Descriptive names ("a float type") get the list; names that are lists do not.
                let expected = if self.name.starts_with("a ") || self.name.starts_with("an ") {
                    let list: Vec<&str> = types.iter().map(|d| d.name()).collect();
                    format!("{} ({})", self.name, list.join(", "))
                } else {
                    self.name.to_string()
                };
                Err(InferError::DType { input, found: dtype, expected })
            }
            _ => Ok(dtype),
        }
    }

    /// True if `dtype` belongs to the set.
    pub fn contains(self, dtype: DType) -> bool {
        self.types.is_none_or(|t| t.contains(&dtype))
    }
}

/// The type sets of ONNX type constraints, by the names the error messages use.
pub(super) mod set {
    use super::TypeSet;
    use crate::dtype::DType as D;

    const fn s(name: &'static str, types: &'static [D]) -> TypeSet {
        TypeSet { name, types: Some(types) }
    }

    /// Any element type.
    pub const ANY: TypeSet = TypeSet { name: "any type", types: None };
    /// Integers and floats up to 64 bits with f16 and bf16.
    pub const NUMERIC: TypeSet = s("a numeric type", &[D::U8, D::U16, D::U32, D::U64, D::I8, D::I16, D::I32, D::I64, D::F16, D::F32, D::F64, D::BF16]);
    /// Signed integers and floats (Neg, Relu).
    pub const SIGNED: TypeSet = s("a signed numeric type", &[D::F32, D::I32, D::I8, D::I16, D::I64, D::F16, D::F64, D::BF16]);
    /// Integers.
    pub const INTEGER: TypeSet = s("an integer type", &[D::U8, D::U16, D::U32, D::U64, D::I8, D::I16, D::I32, D::I64]);
    /// Floats.
    pub const FLOAT: TypeSet = s("a float type", &[D::BF16, D::F16, D::F32, D::F64]);
    /// Floats including 8-bit ones (IsInf, IsNaN, Dropout).
    pub const FLOAT_F8: TypeSet = s("a float type", &[D::BF16, D::F16, D::F32, D::F64, D::F8E4M3FN, D::F8E4M3FNUZ, D::F8E5M2, D::F8E5M2FNUZ]);
    /// `bool`.
    pub const BOOL: TypeSet = s("bool", &[D::Bool]);
    /// `string`.
    pub const STRING: TypeSet = s("string", &[D::String]);
    /// `i64`.
    pub const I64: TypeSet = s("i64", &[D::I64]);
    /// `i32`.
    pub const I32: TypeSet = s("i32", &[D::I32]);
    /// Index types.
    pub const INDEX: TypeSet = s("i32 or i64", &[D::I32, D::I64]);
    /// Types `Equal` compares.
    pub const EQUATABLE: TypeSet = s(
        "a numeric, bool or string type",
        &[D::Bool, D::U8, D::U16, D::U32, D::U64, D::I8, D::I16, D::I32, D::I64, D::F16, D::F32, D::F64, D::BF16, D::String],
    );
    /// Types most reductions, Gemm, MatMul and CumSum accept.
    pub const REDUCIBLE: TypeSet = s("a 32/64-bit integer or float type", &[D::U32, D::U64, D::I32, D::I64, D::F16, D::F32, D::F64, D::BF16]);
    /// Types ReduceMax and ReduceMin accept.
    pub const ORDERED: TypeSet =
        s("a 32/64-bit integer, 8-bit integer, bool or float type", &[D::U32, D::U64, D::I32, D::I64, D::F16, D::F32, D::F64, D::BF16, D::U8, D::I8, D::Bool]);
    /// Types MaxPool accepts.
    pub const MAXPOOL: TypeSet = s("a float or 8-bit integer type", &[D::BF16, D::F16, D::F32, D::F64, D::I8, D::U8]);
    /// 8-bit integers (quantized operands).
    pub const INT8: TypeSet = s("i8 or u8", &[D::I8, D::U8]);
    /// Quantized operands of QLinearMatMul.
    pub const QUANT8: TypeSet = s("an 8-bit integer or float type", &[D::I8, D::U8, D::F8E4M3FN, D::F8E4M3FNUZ, D::F8E5M2, D::F8E5M2FNUZ]);
    /// Scales of QLinearMatMul.
    pub const SCALE: TypeSet = s("f32, f16 or bf16", &[D::F32, D::F16, D::BF16]);
    /// `f32`.
    pub const F32: TypeSet = s("f32", &[D::F32]);
    /// Bases of Pow.
    pub const POW_BASE: TypeSet = s("i32, i64 or a float type", &[D::I32, D::I64, D::F16, D::F32, D::F64, D::BF16]);
    /// Types Range accepts.
    pub const RANGE: TypeSet = s("f32, f64, i16, i32, i64, f16 or bf16", &[D::F32, D::F64, D::I16, D::I32, D::I64, D::F16, D::BF16]);
    /// Inputs of QuantizeLinear.
    pub const QUANT_IN: TypeSet = s("f32, f16, bf16 or i32", &[D::F32, D::F16, D::BF16, D::I32]);
    /// Quantized types of QuantizeLinear and DequantizeLinear.
    pub const QUANTIZED: TypeSet = s(
        "a quantized type",
        &[D::I8, D::U8, D::I16, D::U16, D::I32, D::F8E4M3FN, D::F8E4M3FNUZ, D::F8E5M2, D::F8E5M2FNUZ, D::U4, D::I4, D::F4E2M1, D::U2, D::I2],
    );
    /// Scales of QuantizeLinear and DequantizeLinear.
    pub const QSCALE: TypeSet = s("f32, f16, bf16, i32 or f8e8m0", &[D::F32, D::F16, D::BF16, D::I32, D::F8E8M0]);
    /// Types OneHot reads indices and depth as.
    pub const ONE_HOT_INDEX: TypeSet = s("a numeric type", &[D::U8, D::U16, D::U32, D::U64, D::I8, D::I16, D::I32, D::I64, D::F16, D::F32, D::F64]);
}

/// A shape error.
pub(super) fn shape_err(msg: impl Into<String>) -> InferError {
    InferError::Shape(msg.into())
}

/// An attribute error.
pub(super) fn attr_err(msg: impl Into<String>) -> InferError {
    InferError::Attr(msg.into())
}

/// Formats dims as `[2, seq, 4]`.
pub(super) fn fmt_dims(dims: &[Dim]) -> String {
    crate::echo::list(dims)
}

/// A type with the given dtype and dims.
pub(super) fn tt(dtype: DType, shape: Vec<Dim>) -> TensorType {
    TensorType { dtype, shape }
}

/// A dim for a non-negative `i64` size.
pub(super) fn known(n: i64, what: &str) -> Res<Dim> {
    u64::try_from(n).map(Dim::Known).map_err(|_| shape_err(format!("{what} is negative ({n})")))
}

/// `a + b`, checked.
pub(super) fn add(a: &Dim, b: &Dim) -> Res<Dim> {
    a.add(b).ok_or_else(|| InferError::Overflow(format!("size {a} + {b} overflows")))
}

/// `a * b`, checked.
pub(super) fn mul(a: &Dim, b: &Dim) -> Res<Dim> {
    a.mul(b).ok_or_else(|| InferError::Overflow(format!("size {a} * {b} overflows")))
}

/// `a - b`, where the result must not be negative.
pub(super) fn sub(a: &Dim, b: &Dim) -> Res<Dim> {
    a.sub(b).ok_or_else(|| shape_err(format!("size {a} - {b} is negative")))
}

/// `d + delta` for a signed delta (negative pads, slice offsets).
pub(super) fn offset(d: &Dim, delta: i64) -> Res<Dim> {
    if delta >= 0 { add(d, &Dim::Known(delta as u64)) } else { sub(d, &Dim::Known(delta.unsigned_abs())) }
}

/// The product of `dims`, checked.
pub(super) fn product(dims: &[Dim]) -> Res<Dim> {
    dims.iter().try_fold(Dim::Known(1), |acc, d| mul(&acc, d))
}

/// An axis in `[-rank, rank - 1]` as an index.
pub(super) fn axis(axis: i64, rank: usize, what: &str) -> Res<usize> {
    axis_in(axis, rank, rank, what)
}

/// An axis in `[-count, count - 1]` as an index, for `count` axes (e.g. `rank + 1` for an
/// axis that may also name the end).
pub(super) fn axis_in(axis: i64, count: usize, rank_shown: usize, what: &str) -> Res<usize> {
    let n = i64::try_from(count).map_err(|_| shape_err("rank too large"))?;
    let a = if axis < 0 { axis.checked_add(n) } else { Some(axis) };
    match a {
        Some(a) if (0..n).contains(&a) => Ok(a as usize),
        _ => Err(attr_err(format!("{what} {axis} is out of range for rank {rank_shown}"))),
    }
}

/// Normalizes a list of axes for `rank` axes, rejecting duplicates.
pub(super) fn axes(list: &[i64], rank: usize, what: &str) -> Res<Vec<usize>> {
    let mut out = Vec::with_capacity(list.len());
    for &a in list {
        let i = axis(a, rank, what)?;
        if out.contains(&i) {
            return Err(attr_err(format!("{what} {a} appears twice in {list:?}")));
        }
        out.push(i);
    }
    Ok(out)
}

/// A list attribute of `n` values, or `default` repeated when the attribute is empty.
pub(super) fn per_axis(list: &[i64], n: usize, default: i64, what: &str) -> Res<Vec<i64>> {
    if list.is_empty() {
        return Ok(vec![default; n]);
    }
    if list.len() != n {
        return Err(attr_err(format!("`{what}` has {} values, expected {n}", list.len())));
    }
    Ok(list.to_vec())
}

/// Two dims that must be equal at run time: known sizes must match, a known size wins over
/// a symbol, and of two different symbols the first is kept.
pub(super) fn unify(a: &Dim, b: &Dim, what: &str) -> Res<Dim> {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) if x != y => Err(shape_err(format!("{what}: {x} != {y}"))),
        (Dim::Sym(_), Dim::Known(_)) => Ok(b.clone()),
        _ => Ok(a.clone()),
    }
}

/// `ceil(a / b)` for known sizes, `a / b` for symbolic ones when exact, else a fresh dim.
pub(super) fn div_ceil(cx: &mut Cx<'_, '_>, a: &Dim, b: u64) -> Dim {
    match a {
        _ if b == 0 => cx.fresh(),
        Dim::Known(n) => Dim::Known(n.div_ceil(b)),
        _ => a.div_exact(&Dim::Known(b)).unwrap_or_else(|| cx.fresh()),
    }
}

/// `floor(a / b)` for known sizes, `a / b` for symbolic ones when exact, else a fresh dim.
pub(super) fn div_floor(cx: &mut Cx<'_, '_>, a: &Dim, b: u64) -> Dim {
    match a {
        _ if b == 0 => cx.fresh(),
        Dim::Known(n) => Dim::Known(n / b),
        _ => a.div_exact(&Dim::Known(b)).unwrap_or_else(|| cx.fresh()),
    }
}

/// A known, positive size from an attribute or constant.
pub(super) fn positive(v: i64, what: &str) -> Res<u64> {
    if v > 0 { Ok(v as u64) } else { Err(attr_err(format!("{what} must be positive, found {v}"))) }
}

/// The elements of a constant as `f64`: floats of every IEEE-like width kiln reads, integers
/// and bools.
pub(super) fn to_f64s(t: &Tensor) -> Option<Vec<f64>> {
    let raw = t.raw()?;
    let n = usize::try_from(t.numel()?).ok()?;
    let width = match t.dtype {
        DType::F64 => 8,
        DType::F32 => 4,
        DType::F16 | DType::BF16 => 2,
        _ if matches!(t.dtype.kind(), DTypeKind::Signed | DTypeKind::Unsigned | DTypeKind::Bool) => {
            return t.to_i64s().map(|v| v.into_iter().map(|x| x as f64).collect());
        }
        _ => return None,
    };
    if raw.len() != n.checked_mul(width)? {
        return None;
    }
    let out = raw
        .chunks_exact(width)
        .map(|c| match t.dtype {
            DType::F64 => f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]),
            DType::F32 => f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            DType::F16 => f16_to_f64(u16::from_le_bytes([c[0], c[1]])),
            _ => f64::from(f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16)),
        })
        .collect();
    Some(out)
}

/// Decodes an IEEE half-precision value.
fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let frac = f64::from(h & 0x3ff);
    let mag = match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + frac / 1024.0) * 2f64.powi(exp - 15),
    };
    sign * mag
}

/// A constant's elements as booleans (nonzero), for any numeric or bool type.
pub(super) fn truths(t: &Tensor) -> Option<Vec<bool>> {
    if let Some(v) = t.to_i64s() {
        return Some(v.into_iter().map(|x| x != 0).collect());
    }
    to_f64s(t).map(|v| v.into_iter().map(|x| x != 0.0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_decode() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
        assert!(f16_to_f64(0x7c00).is_infinite());
        assert!(f16_to_f64(0x7e00).is_nan());
    }
}
