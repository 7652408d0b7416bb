//! Cast and CastLike among the types kiln computes with: bool, the integers, f16, bf16, f32
//! and f64. Float → integer truncates toward zero and saturates (numpy agrees in range); f16 and
//! bf16 targets round to nearest even when stored. BitCast reinterprets bits between types of
//! one width.

use kiln_tir::{NodeId, Op};

use super::{map_n, ElemResult, Scope};
use crate::ir::*;
use crate::lower::{elem_type, LowerError, Lowerer};

/// Lowers `n` if it is Cast, CastLike or BitCast.
pub(super) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let bitcast = match cx.node(n).op {
        Op::Cast(_) | Op::CastLike(_) => false,
        Op::BitCast(_) => true,
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
    if bitcast {
        return map_n(cx, n, &[x], |_, a| reinterpret(a[0].clone(), from, to));
    }
    map_n(cx, n, &[x], |s, a| convert(s, a[0].clone(), from, to))
}

/// The bits of `x` as a value of `to`. Half-precision values are widened when loaded, so their
/// bits are not at hand; a bool holds only 0 or 1, so other bytes cannot become one.
fn reinterpret(x: Expr, from: ElemType, to: ElemType) -> ElemResult {
    match (from, to) {
        (ElemType::Scalar(f), ElemType::Scalar(t)) if f.bytes() == t.bytes() && t != ScalarType::Bool => {
            Ok(if f == t { x } else { Expr::Bitcast(t, Box::new(x)) })
        }
        _ => Err(format!("bitcast from {} to {}", from.name(), to.name())),
    }
}

/// The value `x` (loaded from `from` storage) as a value to store into `to` storage.
pub(super) fn convert(s: &mut Scope<'_>, x: Expr, from: ElemType, to: ElemType) -> ElemResult {
    let (tf, tt) = (from.value_type(), to.value_type());
    let half = matches!(to, ElemType::F16 | ElemType::BF16);
    // Rounding a wide value to f32 and then to half precision at the store can round twice;
    // rounding to odd first makes the second rounding exact.
    let wide_int = !tf.is_float() && tf != ScalarType::Bool && tf.bytes() >= 4 && to == ElemType::BF16;
    if half && (tf == ScalarType::F64 || wide_int) {
        let d = if tf == ScalarType::F64 { x } else { s.bind(x.cast(ScalarType::F64)) };
        return Ok(round_to_odd_f32(s, d));
    }
    Ok(if tf == tt { x } else { x.cast(tt) })
}

/// `d` (an f64) rounded to f32 with round-to-odd: truncated toward zero, the last bit set when
/// inexact. f32 keeps more than twice the bits of f16 and bf16 plus two, so rounding this to
/// nearest-even half precision equals rounding `d` directly.
fn round_to_odd_f32(s: &mut Scope<'_>, d: Expr) -> Expr {
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
