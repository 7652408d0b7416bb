//! Typed constants: `0.0f32`, `-3i32`, `255u8`, `true`, `inf_f32`, `nan_f64`,
//! `0x7fc00001_f32` (a NaN with a payload, by its bits).

use std::fmt::Write;

use kiln_tir::text::lex::decimal;

use super::names::scalar_type;
use crate::ir::{Scalar, ScalarType};

/// Appends a constant. Integers of a float or bool type cannot be written back; they print
/// as a marker the parser rejects.
pub(super) fn write_scalar(out: &mut String, s: Scalar) {
    let _ = match s {
        Scalar::Bool(b) => write!(out, "{b}"),
        Scalar::Int(t @ (ScalarType::Bool | ScalarType::F32 | ScalarType::F64), v) => write!(out, "<integer {v} of type {}>", t.name()),
        Scalar::Int(t, v) if t.is_signed_int() => write!(out, "{v}{}", t.name()),
        Scalar::Int(t, v) => write!(out, "{}{}", v as u64, t.name()),
        Scalar::F32(f) if f.is_nan() && f.to_bits() != f32::NAN.to_bits() => write!(out, "0x{:08x}_f32", f.to_bits()),
        Scalar::F64(f) if f.is_nan() && f.to_bits() != f64::NAN.to_bits() => write!(out, "0x{:016x}_f64", f.to_bits()),
        Scalar::F32(f) => write_float(out, f64::from(f), format_args!("{f:?}"), "f32"),
        Scalar::F64(f) => write_float(out, f, format_args!("{f:?}"), "f64"),
    };
}

/// Finite floats in Rust's shortest round-trip form with the suffix attached; the rest as
/// words joined to the suffix by `_`.
fn write_float(out: &mut String, v: f64, shortest: std::fmt::Arguments<'_>, suffix: &str) -> std::fmt::Result {
    match () {
        _ if v.is_nan() => write!(out, "nan_{suffix}"),
        _ if v == f64::INFINITY => write!(out, "inf_{suffix}"),
        _ if v == f64::NEG_INFINITY => write!(out, "-inf_{suffix}"),
        _ => write!(out, "{shortest}{suffix}"),
    }
}

/// Reads a constant from a number token's text or a word (`true`, `nan_f32`, `inf_f64`).
pub(super) fn parse_scalar(text: &str) -> Result<Scalar, String> {
    match text {
        "true" => return Ok(Scalar::Bool(true)),
        "false" => return Ok(Scalar::Bool(false)),
        _ => {}
    }
    let (body, ty) = split_suffix(text)?;
    let negative = body.starts_with('-');
    let magnitude = body.trim_start_matches('-');
    if let Some(hex) = magnitude.strip_prefix("0x").or_else(|| magnitude.strip_prefix("0X")) {
        let bits = u64::from_str_radix(hex, 16).map_err(|_| format!("bad hex constant `{text}`"))?;
        return match ty {
            _ if negative => Err("a hex constant is a bit pattern and takes no sign".into()),
            ScalarType::F32 => u32::try_from(bits).map(|b| Scalar::F32(f32::from_bits(b))).map_err(|_| format!("`{text}` has more than 32 bits")),
            ScalarType::F64 => Ok(Scalar::F64(f64::from_bits(bits))),
            t => Err(format!("hex constants spell float bit patterns, not `{}`", t.name())),
        };
    }
    match ty {
        ScalarType::F32 | ScalarType::F64 => {
            let word = matches!(magnitude, "nan" | "inf");
            if (word && !text.contains('_')) || (magnitude == "nan" && negative) || !(word || is_decimal(magnitude)) {
                return Err(format!("bad float constant `{text}`"));
            }
            if ty == ScalarType::F32 {
                body.parse::<f32>().map(Scalar::F32).map_err(|_| format!("bad float constant `{text}`"))
            } else {
                body.parse::<f64>().map(Scalar::F64).map_err(|_| format!("bad float constant `{text}`"))
            }
        }
        ScalarType::Bool => Err("bool constants are `true` and `false`".into()),
        t if !magnitude.bytes().all(|b| b.is_ascii_digit()) || magnitude.is_empty() => Err(format!("bad `{}` constant `{text}`", t.name())),
        t if t.is_signed_int() => body.parse::<i64>().map(|v| Scalar::Int(t, v)).map_err(|_| format!("`{text}` does not fit in 64 bits")),
        _ if negative => Err(format!("unsigned constant `{text}` is negative")),
        t => body.parse::<u64>().map(|v| Scalar::Int(t, v as i64)).map_err(|_| format!("`{text}` does not fit in 64 bits")),
    }
}

/// `[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?`, what the lexer accepts and `str::parse` agrees on.
fn is_decimal(s: &str) -> bool {
    s.as_bytes().first().is_some_and(u8::is_ascii_digit) && decimal(s, 0).end == s.len()
}

/// Splits `text` into its value and its type suffix. Hex bodies and words need `_` before
/// the suffix (hex digits include `f`); decimals take it directly (`1e-5f32`).
fn split_suffix(text: &str) -> Result<(&str, ScalarType), String> {
    let hex = text.trim_start_matches('-').starts_with("0x");
    let at = match text.rfind('_') {
        Some(i) => Some((i, i + 1)),
        None if hex => return Err(format!("a hex constant needs `_` before its type, as in `0x7fc00001_f32`: `{text}`")),
        None => text.bytes().position(|b| matches!(b, b'i' | b'u' | b'f' | b'b')).map(|i| (i, i)),
    };
    let Some((end, suffix)) = at else {
        return Err(format!("constant `{text}` needs a type suffix, as in `7i64` or `1.0f32`"));
    };
    match scalar_type(&text[suffix..]) {
        Some(t) if end > 0 => Ok((&text[..end], t)),
        _ => Err(format!("constant `{text}` needs a type suffix, as in `7i64` or `1.0f32`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(s: Scalar) -> String {
        let mut out = String::new();
        write_scalar(&mut out, s);
        let back = parse_scalar(&out).unwrap_or_else(|e| panic!("{out}: {e}"));
        match (s, back) {
            (Scalar::F32(a), Scalar::F32(b)) => assert_eq!(a.to_bits(), b.to_bits(), "{out}"),
            (Scalar::F64(a), Scalar::F64(b)) => assert_eq!(a.to_bits(), b.to_bits(), "{out}"),
            _ => assert_eq!(s, back, "{out}"),
        }
        out
    }

    #[test]
    fn constants_round_trip_bit_exactly() {
        assert_eq!(round_trip(Scalar::F32(0.0)), "0.0f32");
        assert_eq!(round_trip(Scalar::F32(-0.0)), "-0.0f32");
        assert_eq!(round_trip(Scalar::F32(1e-5)), "1e-5f32");
        assert_eq!(round_trip(Scalar::F32(0.1)), "0.1f32");
        assert_eq!(round_trip(Scalar::F64(0.1)), "0.1f64");
        assert_eq!(round_trip(Scalar::F32(f32::NAN)), "nan_f32");
        assert_eq!(round_trip(Scalar::F32(f32::from_bits(0x7fc0_0001))), "0x7fc00001_f32");
        assert_eq!(round_trip(Scalar::F32(-f32::NAN)), "0xffc00000_f32");
        assert_eq!(round_trip(Scalar::F64(f64::NEG_INFINITY)), "-inf_f64");
        assert_eq!(round_trip(Scalar::F32(f32::INFINITY)), "inf_f32");
        assert_eq!(round_trip(Scalar::Int(ScalarType::I64, -7)), "-7i64");
        assert_eq!(round_trip(Scalar::Int(ScalarType::U64, -1)), "18446744073709551615u64");
        assert_eq!(round_trip(Scalar::Int(ScalarType::U8, 255)), "255u8");
        assert_eq!(round_trip(Scalar::Bool(true)), "true");
        for f in [f32::MIN_POSITIVE, f32::MAX, f32::MIN, 1e-45, 3.4028235e38, 16777217.0, 1e20] {
            round_trip(Scalar::F32(f));
        }
        for f in [f64::MIN_POSITIVE, f64::MAX, 5e-324, std::f64::consts::PI, 1e300] {
            round_trip(Scalar::F64(f));
        }
    }

    #[test]
    fn bad_constants_are_errors() {
        for text in [
            "7",
            "1.0",
            "0x7fc00001f32",
            "0x1_i32",
            "-0x1_f32",
            "nanf32",
            "-nan_f32",
            "1.0i32",
            "-1u8",
            "1bool",
            "99999999999999999999i64",
            "0x1ffffffff_f32",
            "1e5_x",
            "_f32",
            "1.5e_f32",
        ] {
            assert!(parse_scalar(text).is_err(), "{text}");
        }
        assert_eq!(parse_scalar("1f32"), Ok(Scalar::F32(1.0)));
        assert_eq!(parse_scalar("1.5_f64"), Ok(Scalar::F64(1.5)));
    }
}
