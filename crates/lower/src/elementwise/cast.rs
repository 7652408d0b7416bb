//! Cast and CastLike among every type kiln stores: bool, the integers (the packed 4- and 2-bit
//! ones too), f16, bf16, the float8 formats, float4 e2m1, f32 and f64. BitCast reinterprets
//! bits between types of one width.
//!
//! - Float → integer truncates toward zero and saturates (numpy agrees in range); into the
//!   4- and 2-bit integers it goes through `i64` and wraps, as ONNX's reference does.
//! - Narrow float targets (f16, bf16, float8, float4) round to nearest even when stored. A
//!   value that is already rounded once (an `f64`, or a wide integer into bf16) is first
//!   rounded to `f32` with round-to-odd, so the store's rounding is the only one that counts.
//! - float8 targets other than e8m0 saturate (`saturate = 1`, the default): the value is
//!   clamped to the largest finite one before the store, which does not saturate by itself
//!   (see [`ElemType`]). float4 e2m1 always saturates.
//! - float8 e8m0 rounds by `round_mode`: `down` is what its store does; `up` and `nearest`
//!   compute the power of two first, from the `f32`'s bits, with `saturate` keeping the
//!   largest exponent from rounding up to NaN (ONNX's reference algorithm).

use kiln_tir::op::RoundMode;
use kiln_tir::{NodeId, Op};

use super::{cast_to, map_n, ElemResult, Scope};
use kiln_loops::ir::*;
use crate::{elem_type, LowerError, Lowerer};

/// What a conversion into a float8 type does with values it cannot hold exactly: ONNX Cast's
/// `saturate` and `round_mode`. Other targets ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate) struct CastOpts {
    /// Finite values beyond the largest finite one, and infinities, become that value;
    /// otherwise they become infinity or NaN, as the format has.
    pub saturate: bool,
    /// How e8m0 rounds.
    pub e8m0: RoundMode,
}

impl Default for CastOpts {
    fn default() -> CastOpts {
        CastOpts { saturate: true, e8m0: RoundMode::Up }
    }
}

impl CastOpts {
    /// The options from Cast's attributes.
    fn from_attrs(saturate: i64, e8m0: RoundMode) -> CastOpts {
        CastOpts { saturate: saturate != 0, e8m0 }
    }
}

/// Lowers `n` if it is Cast, CastLike or BitCast.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let opts = match &cx.node(n).op {
        Op::Cast(o) => Some(CastOpts::from_attrs(o.saturate, o.round_mode)),
        Op::CastLike(o) => Some(CastOpts::from_attrs(o.saturate, o.round_mode)),
        Op::BitCast(_) => None,
        _ => return Ok(false),
    };
    // CastLike's second input only names the type, which is the output's.
    let x = cx.required(n, 0)?;
    let Some(out) = cx.node(n).outputs.first().copied().flatten() else {
        return Ok(true);
    };
    let dtype = cx.g.ty(out).dtype;
    let Some(to) = elem_type(dtype) else {
        return Err(cx.unsupported(n, format!("cast to {dtype}")));
    };
    let from = x.elem;
    if from == to {
        // A cast to the type it has already is the identity: a view, like Identity.
        cx.alias_output(n, 0, &x);
        return Ok(true);
    }
    match opts {
        None => map_n(cx, n, &[x], |_, a| reinterpret(a[0].clone(), from, to)),
        Some(opts) => map_n(cx, n, &[x], |s, a| convert(s, a[0].clone(), from, to, opts)),
    }
}

/// The bits of `x` as a value of `to`. Narrow floats are widened when loaded, so their bits
/// are not at hand; a bool holds only 0 or 1, so other bytes cannot become one.
fn reinterpret(x: Expr, from: ElemType, to: ElemType) -> ElemResult {
    match (from, to) {
        (ElemType::Scalar(f), ElemType::Scalar(t)) if f.bytes() == t.bytes() && t != ScalarType::Bool => {
            Ok(if f == t { x } else { Expr::Bitcast(t, Box::new(x)) })
        }
        _ => Err(format!("bitcast from {} to {}", from.name(), to.name())),
    }
}

/// The largest finite value of a float8 target that saturates, or `None`.
fn saturation_bound(to: ElemType) -> Option<f64> {
    Some(match to {
        ElemType::F8E4M3FN => 448.0,
        ElemType::F8E4M3FNUZ => 240.0,
        ElemType::F8E5M2 | ElemType::F8E5M2FNUZ => 57344.0,
        _ => return None,
    })
}

/// The value `x` (loaded from `from` storage) as a value to store into `to` storage, with
/// Cast's rounding rules (see the module doc).
pub(in crate) fn convert(s: &mut Scope<'_>, x: Expr, from: ElemType, to: ElemType, opts: CastOpts) -> ElemResult {
    let (tf, tt) = (from.value_type(), to.value_type());
    if to == ElemType::F8E8M0 {
        return Ok(to_e8m0(s, cast_to(x, tf, ScalarType::F32), opts));
    }
    let narrow_float = matches!(to, ElemType::F16 | ElemType::BF16 | ElemType::F4E2M1) || saturation_bound(to).is_some();
    // Rounding a wide value to f32 and then to a narrow float at the store can round twice;
    // rounding to odd first makes the second rounding exact. Integers into f16 or float8 are
    // exact in f32 up to far beyond the formats' ranges, so only bf16 needs it.
    let wide_int = !tf.is_float() && tf != ScalarType::Bool && tf.bytes() >= 4 && to == ElemType::BF16;
    let value = if narrow_float && (tf == ScalarType::F64 || wide_int) {
        let d = if tf == ScalarType::F64 { x } else { s.bind(x.cast(ScalarType::F64)) };
        round_to_odd_f32(s, d)
    } else if to.is_packed() && !tt.is_float() && tf.is_float() {
        // Float → int4/int2 truncates and wraps: through i64, then integer narrowing. Beyond
        // i64 (and NaN) the reference evaluator gives a multiple of 16, so 0 here.
        let x = s.bind(x);
        let inside = x.clone().un(UnOp::Abs).cmp(CmpOp::Lt, Expr::float(tf, 2f64.powi(63)));
        inside.select(x, Expr::float(tf, 0.0)).cast(ScalarType::I64).cast(tt)
    } else {
        cast_to(x, tf, tt)
    };
    Ok(match saturation_bound(to) {
        Some(max) if opts.saturate => {
            // NaN fails both comparisons and passes through with its sign.
            let v = s.bind(value);
            let (hi, lo) = (Expr::float(tt, max), Expr::float(tt, -max));
            v.clone().cmp(CmpOp::Gt, hi.clone()).select(hi, v.clone().cmp(CmpOp::Lt, lo.clone()).select(lo, v))
        }
        _ => value,
    })
}

/// `f` (an f32) as an f32 holding the float8 e8m0 value `opts` rounds it to, exactly (an e8m0
/// store then keeps it); for [`RoundMode::Down`], `f` itself, which the store truncates.
fn to_e8m0(s: &mut Scope<'_>, f: Expr, opts: CastOpts) -> Expr {
    use ScalarType::{F32, U32};
    let u = |v: i64| Expr::int(U32, v);
    if opts.e8m0 == RoundMode::Down {
        return f;
    }
    let bits = s.bind(Expr::Bitcast(U32, Box::new(f)));
    let exp = s.bind(bits.clone().bin(BinOp::Shr, u(23)).bin(BinOp::And, u(0xff)));
    let round_up = match opts.e8m0 {
        // Any mantissa bit.
        RoundMode::Up | RoundMode::Down => bits.bin(BinOp::And, u(0x7f_ffff)).cmp(CmpOp::Ne, u(0)),
        // The guard bit, and a bit below it or a non-zero exponent (ONNX's reference test).
        RoundMode::Nearest => {
            let guard = bits.clone().bin(BinOp::And, u(0x40_0000)).cmp(CmpOp::Ne, u(0));
            let rest = bits.bin(BinOp::And, u(0x3f_ffff)).cmp(CmpOp::Ne, u(0)).bin(BinOp::Or, exp.clone().cmp(CmpOp::Ne, u(0)));
            guard.bin(BinOp::And, rest)
        }
    };
    // NaN and infinity (0xff) stay NaN; with saturation the largest exponent stays.
    let limit = if opts.saturate { 0xfe } else { 0xff };
    let step = round_up.bin(BinOp::And, exp.clone().cmp(CmpOp::Lt, u(limit)));
    let e = s.bind(exp.bin(BinOp::Add, step.select(u(1), u(0))));
    // 2^(e − 127): the exponent field, except 2^−127 (an f32 subnormal) and NaN.
    let pow2 = e.clone().cmp(CmpOp::Eq, u(0xff)).select(u(0x7fc0_0000), e.clone().bin(BinOp::Shl, u(23)));
    let pow2 = e.cmp(CmpOp::Eq, u(0)).select(u(0x0040_0000), pow2);
    Expr::Bitcast(F32, Box::new(pow2))
}

/// `d` (an f64) rounded to f32 with round-to-odd: truncated toward zero, the last bit set when
/// inexact. f32 keeps more than twice the bits of f16, bf16 and the float8 formats plus two,
/// so rounding this to nearest-even in those formats equals rounding `d` directly.
pub(in crate) fn round_to_odd_f32(s: &mut Scope<'_>, d: Expr) -> Expr {
    use ScalarType::{F32, F64, U32};
    let d = s.bind(d);
    let t = s.bind(d.clone().cast(F32));
    let back = s.bind(t.clone().cast(F64));
    let bits = s.bind(Expr::Bitcast(U32, Box::new(t)));
    // Rounded away from zero: step the magnitude back by one ulp (NaN compares false).
    let away = back.clone().un(UnOp::Abs).cmp(CmpOp::Gt, d.clone().un(UnOp::Abs));
    let toward = away.select(bits.clone().bin(BinOp::Sub, Expr::int(U32, 1)), bits.clone());
    let inexact = back.cmp(CmpOp::Ne, d);
    let odd = inexact.select(toward.bin(BinOp::Or, Expr::int(U32, 1)), bits);
    Expr::Bitcast(F32, Box::new(odd))
}
