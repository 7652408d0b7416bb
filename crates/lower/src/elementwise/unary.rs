//! One-input math and logic ops: Neg, Abs, Sign, Reciprocal, rounding, Sqrt, the runtime math
//! functions, Sigmoid, IsNaN, IsInf, Not and BitwiseNot.

use kiln_tir::Op;

use super::{c, need_float, need_int, need_number, ElemResult, Scope, UnaryFn};
use kiln_loops::ir::*;

/// A float-only op computed by `f`.
fn float(f: impl FnOnce(&mut Scope<'_>, Expr, ScalarType) -> Expr + 'static) -> UnaryFn {
    Box::new(move |s, x, ty| {
        need_float(ty)?;
        Ok(f(s, x, ty))
    })
}

/// An op on every numeric type, computed by `f`.
fn number(f: impl FnOnce(&mut Scope<'_>, Expr, ScalarType) -> Expr + 'static) -> UnaryFn {
    Box::new(move |s, x, ty| {
        need_number(ty)?;
        Ok(f(s, x, ty))
    })
}

/// A runtime math function of a float.
fn math(f: MathFn) -> UnaryFn {
    float(move |_, x, _| x.math(f))
}

/// The element function of `op` if it is a one-input math or logic op.
pub(super) fn unary_fn(op: &Op) -> Option<UnaryFn> {
    Some(match op {
        Op::Neg(_) => number(|_, x, _| x.un(UnOp::Neg)),
        Op::Abs(_) => number(|_, x, _| x.un(UnOp::Abs)),
        Op::Sign(_) => number(|_, x, ty| sign(x, ty)),
        // 1/x
        Op::Reciprocal(_) => float(|_, x, ty| c(ty, 1.0).bin(BinOp::Div, x)),
        Op::Floor(_) => float(|_, x, _| x.un(UnOp::Floor)),
        Op::Ceil(_) => float(|_, x, _| x.un(UnOp::Ceil)),
        // Half to even; f64 has no rounding instruction, so it calls the runtime.
        Op::Round(_) => float(|_, x, ty| if ty == ScalarType::F64 { x.math(MathFn::Rint) } else { x.un(UnOp::Round) }),
        Op::Sqrt(_) => float(|_, x, _| x.un(UnOp::Sqrt)),
        Op::Exp(_) => math(MathFn::Exp),
        Op::Log(_) => math(MathFn::Log),
        Op::Tanh(_) => math(MathFn::Tanh),
        Op::Erf(_) => math(MathFn::Erf),
        Op::Sin(_) => math(MathFn::Sin),
        Op::Cos(_) => math(MathFn::Cos),
        Op::Tan(_) => math(MathFn::Tan),
        Op::Asin(_) => math(MathFn::Asin),
        Op::Acos(_) => math(MathFn::Acos),
        Op::Atan(_) => math(MathFn::Atan),
        Op::Sinh(_) => math(MathFn::Sinh),
        Op::Cosh(_) => math(MathFn::Cosh),
        Op::Asinh(_) => math(MathFn::Asinh),
        Op::Acosh(_) => math(MathFn::Acosh),
        Op::Atanh(_) => math(MathFn::Atanh),
        Op::Sigmoid(_) => float(|_, x, ty| sigmoid(x, ty)),
        Op::IsNaN(_) => float(|_, x, _| x.un(UnOp::IsNan)),
        Op::IsInf(a) => {
            let (neg, pos) = (a.detect_negative != 0, a.detect_positive != 0);
            float(move |_, x, ty| {
                let is = |v: f64| x.clone().cmp(CmpOp::Eq, c(ty, v));
                match (neg, pos) {
                    (true, true) => is(f64::INFINITY).bin(BinOp::Or, is(f64::NEG_INFINITY)),
                    (true, false) => is(f64::NEG_INFINITY),
                    (false, true) => is(f64::INFINITY),
                    (false, false) => Expr::Const(Scalar::Bool(false)),
                }
            })
        }
        Op::Not(_) => Box::new(|_, x, ty| -> ElemResult {
            if ty != ScalarType::Bool {
                return Err(format!("{} operand (Not is defined on bool)", ty.name()));
            }
            Ok(x.un(UnOp::Not))
        }),
        Op::BitwiseNot(_) => Box::new(|_, x, ty| -> ElemResult {
            need_int(ty)?;
            Ok(x.un(UnOp::Not))
        }),
        _ => return None,
    })
}

/// sign(x): 1, −1 or 0; NaN stays NaN (numpy `sign`).
fn sign(x: Expr, ty: ScalarType) -> Expr {
    let zero = c(ty, 0.0);
    // Unsigned values are never negative; the −1 arm is dead there.
    let neg = if ty.is_float() || ty.is_signed_int() { c(ty, -1.0) } else { zero.clone() };
    let rest = if ty.is_float() { x.clone().cmp(CmpOp::Eq, zero.clone()).select(zero.clone(), x.clone()) } else { zero.clone() };
    x.clone().cmp(CmpOp::Gt, zero.clone()).select(c(ty, 1.0), x.cmp(CmpOp::Lt, zero).select(neg, rest))
}

/// 1 / (1 + e^−x); exact enough for every x (e^−x overflowing gives 0).
pub(super) fn sigmoid(x: Expr, ty: ScalarType) -> Expr {
    c(ty, 1.0).bin(BinOp::Div, c(ty, 1.0).bin(BinOp::Add, x.un(UnOp::Neg).math(MathFn::Exp)))
}
