//! Cast and CastLike: conversions between every element type ONNX defines.
//!
//! Float to float rounds to nearest even once; float8 targets saturate unless `saturate=0`;
//! float to integer truncates toward zero and wraps (out-of-range values are undefined in
//! ONNX); integer to integer wraps; anything to bool tests for nonzero.

use bytes::Bytes;
use kiln_tir::dtype::DTypeKind;
use kiln_tir::op::RoundMode;
use kiln_tir::{DType, Op};

use crate::args::Args;
use crate::array::{Arr, Buf, float_to_int, minifloat_of, wrap_int};
use crate::error::{Result, invalid, unsupported};
use crate::minifloat;

/// Evaluates Cast and CastLike.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    let (to, saturate, round) = match op {
        Op::Cast(o) => (Ok(o.to), o.saturate != 0, o.round_mode),
        Op::CastLike(o) => (a.tensor(1).map(|t| t.dtype), o.saturate != 0, o.round_mode),
        _ => return None,
    };
    Some((|| Ok(vec![cast(a.op, &a.arr(0)?, to?, Rounding { saturate, round })?]))())
}

/// Cast's rounding attributes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rounding {
    /// Float8 targets clamp out-of-range values to the largest finite value.
    pub saturate: bool,
    /// How float8 e8m0 rounds.
    pub round: RoundMode,
}

impl Default for Rounding {
    fn default() -> Rounding {
        Rounding { saturate: true, round: RoundMode::Up }
    }
}

/// `x` converted to `to`.
pub(crate) fn cast(op: &'static str, x: &Arr, to: DType, r: Rounding) -> Result<Arr> {
    let buf = match to.kind() {
        DTypeKind::Float => Buf::F(to_floats(op, x, to, r)?),
        DTypeKind::Signed | DTypeKind::Unsigned => Buf::I(to_ints(op, x, to)?),
        DTypeKind::Bool => Buf::B(match &x.buf {
            Buf::F(v) => v.iter().map(|&e| e != 0.0).collect(),
            Buf::I(v) => v.iter().map(|&e| e != 0).collect(),
            Buf::B(v) => v.clone(),
            Buf::S(v) => v.iter().map(|s| parse_f64(op, s).map(|f| f != 0.0)).collect::<Result<_>>()?,
        }),
        DTypeKind::String => Buf::S(to_strings(x)),
        DTypeKind::Complex => return Err(unsupported(op, format!("cast to {to}"))),
    };
    Ok(Arr { dtype: to, shape: x.shape.clone(), buf })
}

/// Rounds each value to the float type `to`.
fn to_floats(op: &'static str, x: &Arr, to: DType, r: Rounding) -> Result<Vec<f64>> {
    let round = |v: f64| -> f64 {
        match to {
            DType::F64 => v,
            DType::F32 => f64::from(v as f32),
            DType::F8E8M0 => minifloat::e8m0_decode(minifloat::e8m0_encode(v, r.saturate, r.round)),
            _ => match minifloat_of(to) {
                // Saturation applies to float8 only; f16/bf16 overflow to infinity and e2m1
                // always saturates.
                Some(fmt) => fmt.decode(fmt.encode(v, r.saturate && to.bits() == 8)),
                None => v,
            },
        }
    };
    Ok(match &x.buf {
        Buf::F(v) => v.iter().map(|&e| round(e)).collect(),
        // i128 -> f32 rounds once; going through f64 could round twice.
        Buf::I(v) if to == DType::F32 => v.iter().map(|&e| f64::from(e as f32)).collect(),
        Buf::I(v) => v.iter().map(|&e| round(e as f64)).collect(),
        Buf::B(v) => v.iter().map(|&e| if e { 1.0 } else { 0.0 }).collect(),
        Buf::S(v) => v.iter().map(|s| parse_f64(op, s).map(round)).collect::<Result<_>>()?,
    })
}

/// Converts each value to the integer type `to`.
fn to_ints(op: &'static str, x: &Arr, to: DType) -> Result<Vec<i128>> {
    Ok(match &x.buf {
        Buf::F(v) => v.iter().map(|&e| wrap_int(float_to_int(e), to)).collect(),
        Buf::I(v) => v.iter().map(|&e| wrap_int(e, to)).collect(),
        Buf::B(v) => v.iter().map(|&e| i128::from(e)).collect(),
        Buf::S(v) => v
            .iter()
            .map(|s| {
                let text = std::str::from_utf8(s).map_err(|_| invalid(op, "string is not UTF-8"))?.trim();
                match text.parse::<i128>() {
                    Ok(i) => Ok(wrap_int(i, to)),
                    Err(_) => parse_f64(op, s).map(|f| wrap_int(float_to_int(f), to)),
                }
            })
            .collect::<Result<_>>()?,
    })
}

/// Parses a numeric literal; `INF`, `+INF`, `-INF` and `NaN` in any case are special values.
fn parse_f64(op: &'static str, s: &[u8]) -> Result<f64> {
    let text = std::str::from_utf8(s).map_err(|_| invalid(op, "string is not UTF-8"))?.trim();
    match text.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => return Ok(f64::INFINITY),
        "-inf" | "-infinity" => return Ok(f64::NEG_INFINITY),
        "nan" | "+nan" | "-nan" => return Ok(f64::NAN),
        _ => {}
    }
    text.parse::<f64>().map_err(|_| invalid(op, format!("`{text}` is not a number")))
}

/// Formats each value the way numpy's `astype(str)` does.
fn to_strings(x: &Arr) -> Vec<Bytes> {
    let text: Vec<String> = match &x.buf {
        Buf::F(v) => v.iter().map(|&e| float_text(e, x.dtype)).collect(),
        Buf::I(v) => v.iter().map(|e| e.to_string()).collect(),
        Buf::B(v) => v.iter().map(|&e| if e { "True" } else { "False" }.to_string()).collect(),
        Buf::S(v) => return v.clone(),
    };
    text.into_iter().map(Bytes::from).collect()
}

/// Python's `repr` of a float: the shortest digits that round-trip in the source type,
/// positional for exponents in [-4, 16), scientific with a two-digit exponent otherwise.
fn float_text(v: f64, dtype: DType) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let (sci, pos) = if dtype == DType::F64 { (format!("{v:e}"), format!("{v}")) } else { (format!("{:e}", v as f32), format!("{}", v as f32)) };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        if pos.contains('.') { pos } else { format!("{pos}.0") }
    } else {
        format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}
