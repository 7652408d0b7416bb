//! Arithmetic: Add, Sub, Mul, Div, Mod, Pow, and the variadic Max, Min, Sum and Mean.

use kiln_tir::{DType, NodeId, Op, Tensor};

use super::{c, cast_to, map_n, need_float, need_number, operands, ElemResult, Scope};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Lowers `n` if it is an arithmetic op.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let op = match &cx.node(n).op {
        Op::Add(_) => BinOp::Add,
        Op::Sub(_) => BinOp::Sub,
        Op::Mul(_) => BinOp::Mul,
        Op::Max(_) => BinOp::Max,
        Op::Min(_) => BinOp::Min,
        Op::Sum(_) => BinOp::Add,
        Op::Mean(_) => return mean(cx, n),
        Op::Div(_) => return div(cx, n),
        Op::Mod(m) => return modulo(cx, n, m.fmod != 0),
        Op::Pow(_) => return pow(cx, n),
        _ => return Ok(false),
    };
    // Binary ops fold too: a op b. Max and Min propagate NaN like numpy.maximum.
    let (ops, ty) = operands(cx, n)?;
    map_n(cx, n, &ops, |s, a| {
        need_number(ty)?;
        Ok(fold(s, op, a))
    })
}

/// `a[0] op a[1] op ...`, left to right. The running value is bound to a variable every few
/// terms so that a node with a million operands is a million statements, not an expression a
/// million deep.
fn fold(s: &mut Scope<'_>, op: BinOp, a: &[Expr]) -> Expr {
    a[1..].iter().enumerate().fold(a[0].clone(), |acc, (i, x)| {
        let e = acc.bin(op, x.clone());
        if i % 16 == 15 { s.bind(e) } else { e }
    })
}

/// (x₁ + ... + xₙ) / n.
fn mean(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let (ops, ty) = operands(cx, n)?;
    let count = ops.len();
    map_n(cx, n, &ops, |s, a| {
        need_float(ty)?;
        Ok(fold(s, BinOp::Add, a).bin(BinOp::Div, c(ty, count as f64)))
    })
}

/// Registers node `n`'s division-by-zero error if `ty` is an integer type (float division by
/// zero is IEEE).
fn zero_check(cx: &mut Lowerer<'_>, n: NodeId, ty: ScalarType) -> Option<u32> {
    (!ty.is_float()).then(|| cx.error(n, "division by zero"))
}

/// Adds the check that the integer divisor `b` is not zero.
fn check_divisor(s: &mut Scope<'_>, b: &Expr, ty: ScalarType, error: Option<u32>) {
    if let Some(error) = error {
        s.stmts.push(Stmt::Check { cond: b.clone().cmp(CmpOp::Ne, c(ty, 0.0)), error });
    }
}

/// a / b: IEEE for floats; integers truncate toward zero, and a zero divisor is a run-time error.
fn div(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let (ops, ty) = operands(cx, n)?;
    let error = zero_check(cx, n, ty);
    map_n(cx, n, &ops, |s, a| {
        need_number(ty)?;
        check_divisor(s, &a[1], ty, error);
        Ok(a[0].clone().bin(BinOp::Div, a[1].clone()))
    })
}

/// a mod b. `fmod`: C's remainder (the dividend's sign). Otherwise Python's (numpy.mod): the
/// divisor's sign, and a zero result is a zero of the divisor's sign for floats.
fn modulo(cx: &mut Lowerer<'_>, n: NodeId, fmod: bool) -> Result<bool, LowerError> {
    let (ops, ty) = operands(cx, n)?;
    let error = zero_check(cx, n, ty);
    map_n(cx, n, &ops, |s, args| {
        need_number(ty)?;
        let (a, b) = (args[0].clone(), args[1].clone());
        check_divisor(s, &b, ty, error);
        let r = s.bind(a.bin(BinOp::Rem, b.clone()));
        if fmod || !(ty.is_float() || ty.is_signed_int()) {
            return Ok(r);
        }
        let zero = c(ty, 0.0);
        let signs_differ = r.clone().cmp(CmpOp::Lt, zero.clone()).bin(BinOp::Xor, b.clone().cmp(CmpOp::Lt, zero.clone()));
        let adjust = r.clone().cmp(CmpOp::Ne, zero.clone()).bin(BinOp::And, signs_differ);
        let python = adjust.select(r.clone().bin(BinOp::Add, b.clone()), r.clone());
        if !ty.is_float() {
            return Ok(python);
        }
        let signed_zero = b.cmp(CmpOp::Lt, zero.clone()).select(c(ty, -0.0), zero.clone());
        Ok(r.cmp(CmpOp::Eq, zero).select(signed_zero, python))
    })
}

/// The value of a one-element float or integer constant.
fn const_scalar(t: &Tensor) -> Option<f64> {
    if t.numel()? != 1 {
        return None;
    }
    let raw = t.raw()?;
    match t.dtype {
        DType::F32 => Some(f64::from(f32::from_le_bytes(raw.get(..4)?.try_into().ok()?))),
        DType::F64 => Some(f64::from_le_bytes(raw.get(..8)?.try_into().ok()?)),
        _ => t.to_i64s()?.first().map(|&v| v as f64),
    }
}

/// a^b with the result in a's type (numpy.power, then cast to a's type).
///
/// A float base computes in `f32`, or in `f64` when numpy promotes the pair to `f64` (an f64
/// side, or a 32- or 64-bit integer exponent). An integer base with a float exponent computes
/// in `f64` and truncates. Integer powers multiply exactly (wrapping) by repeated squaring; a
/// negative integer exponent, an error in numpy, gives the truncated real power.
fn pow(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let base = cx.required(n, 0)?;
    let exponent = cx.required(n, 1)?;
    let (ta, tb) = (base.ty(), exponent.ty());
    if ta == ScalarType::Bool || tb == ScalarType::Bool {
        return Err(cx.unsupported(n, "bool operands"));
    }
    // x^1 = x and x^2 = x·x exactly (both correctly rounded), and need no runtime call.
    let small = cx.const_input(n, 1).and_then(const_scalar).filter(|&e| e == 1.0 || e == 2.0);
    if let (Some(e), true) = (small, ta.is_float()) {
        return map_n(cx, n, &[base], |_, a| Ok(if e == 1.0 { a[0].clone() } else { a[0].clone().bin(BinOp::Mul, a[0].clone()) }));
    }
    map_n(cx, n, &[base, exponent], |s, args| -> ElemResult {
        let (a, b) = (args[0].clone(), args[1].clone());
        let real = |ct: ScalarType| Expr::Math(MathFn::Pow, vec![cast_to(a.clone(), ta, ct), cast_to(b.clone(), tb, ct)]);
        if ta.is_float() {
            let wide = ta == ScalarType::F64 || tb == ScalarType::F64 || (!tb.is_float() && tb.bytes() >= 4);
            let ct = if wide { ScalarType::F64 } else { ScalarType::F32 };
            return Ok(cast_to(real(ct), ct, ta));
        }
        let truncated = real(ScalarType::F64).cast(ta);
        if tb.is_float() {
            return Ok(truncated);
        }
        let exact = int_pow(s, a, b.clone(), ta, tb);
        Ok(if tb.is_signed_int() { b.cmp(CmpOp::Lt, c(tb, 0.0)).select(truncated, exact) } else { exact })
    })
}

/// a^b for integers, b ≥ 0, by repeated squaring over every bit of b (wrapping like numpy).
fn int_pow(s: &mut Scope<'_>, a: Expr, b: Expr, ta: ScalarType, tb: ScalarType) -> Expr {
    let acc = s.local(ta, Expr::int(ta, 1));
    let square = s.local(ta, a);
    let bits = s.local(tb, b);
    let i = s.k.var(ScalarType::I64);
    let odd = Expr::Var(bits).bin(BinOp::And, Expr::int(tb, 1)).cmp(CmpOp::Ne, Expr::int(tb, 0));
    let body = vec![
        Stmt::If { cond: odd, then: vec![Stmt::Assign(acc, Expr::Var(acc).bin(BinOp::Mul, Expr::Var(square)))], otherwise: Vec::new() },
        Stmt::Assign(square, Expr::Var(square).bin(BinOp::Mul, Expr::Var(square))),
        Stmt::Assign(bits, Expr::Var(bits).bin(BinOp::Shr, Expr::int(tb, 1))),
    ];
    s.stmts.push(Stmt::For { var: i, extent: u64::from(8 * tb.bytes()), body });
    Expr::Var(acc)
}
