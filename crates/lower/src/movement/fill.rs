//! Generated tensors: ConstantOfShape, Range, EyeLike, and Shape and Size (whose answers are
//! static, so they become stores of constants when folding has not removed them already).

use kiln_tir::{NodeId, Op, Tensor};

use super::layout::store;
use super::{Body, convert, int_param, tensor_scalar};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// Lowers `n` if it is one of this file's ops.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::ConstantOfShape(c) => constant_of_shape(cx, n, c.value.clone())?,
        Op::Range(_) => range(cx, n)?,
        Op::EyeLike(e) => eye_like(cx, n, e.k)?,
        Op::Shape(s) => shape(cx, n, s.start, s.end)?,
        Op::Size(_) => {
            let x = cx.required(n, 0)?;
            constants(cx, n, &[x.numel() as i64])?
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Fills output 0 with `value` (of its value type).
fn fill(b: &mut Body, y: &Operand, value: Expr) {
    b.nest(&[y.numel()], |_, i| vec![store(y, i[0].clone(), value)]);
}

fn constant_of_shape(cx: &mut Lowerer<'_>, n: NodeId, value: Option<Tensor>) -> Result<(), LowerError> {
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let mut b = Body::new(cx, n);
    let shape = int_param(cx, n, 0, &mut b)?.ok_or_else(|| cx.unsupported(n, "input shape is missing"))?;
    if shape.len() != y.rank() {
        return Err(cx.unsupported(n, "invalid model: the shape input does not match the output rank"));
    }
    for (s, &d) in shape.iter().zip(&y.dims) {
        b.check(cx, n, s.clone().cmp(CmpOp::Eq, Expr::idx(d as i64)), "the shape input does not match the output shape")?;
    }
    let value = match &value {
        Some(t) => tensor_scalar(t, 0, y.ty()).ok_or_else(|| cx.unsupported(n, "value of unsupported type"))?,
        None => Expr::int(y.ty(), 0),
    };
    fill(&mut b, &y, value);
    b.push(cx);
    Ok(())
}

/// A scalar input of `n` as a value of type `ty`: its constant, or a load bound in the preamble.
fn scalar_input(cx: &mut Lowerer<'_>, n: NodeId, i: usize, ty: ScalarType, b: &mut Body) -> Result<Expr, LowerError> {
    if let Some(t) = cx.const_input(n, i) {
        return tensor_scalar(t, 0, ty).ok_or_else(|| cx.unsupported(n, format!("input {i} of unsupported type")));
    }
    let x = cx.required(n, i)?;
    if x.numel() != 1 {
        return Err(cx.unsupported(n, format!("invalid model: input {i} must have one element")));
    }
    Ok(b.bind(ty, convert(Expr::load(x.buf, Expr::idx(0)), x.ty(), ty)))
}

/// Range, computed as numpy's `arange` does: `start + i·delta` in `i64` for integers, and in
/// `f64` with `delta` re-derived as `(start + delta) − start` for floats.
fn range(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let ty = y.ty();
    let len = y.numel() as i64;
    let mut b = Body::new(cx, n);
    let calc = if ty.is_float() { ScalarType::F64 } else { ScalarType::I64 };
    let [start, limit, delta] = [0, 1, 2].map(|i| scalar_input(cx, n, i, calc, &mut b));
    let (start, limit, delta) = (start?, limit?, delta?);
    let zero = Expr::int(calc, 0);
    b.check(cx, n, delta.clone().cmp(CmpOp::Ne, zero.clone()), "range delta is zero")?;
    let count = if calc == ScalarType::F64 {
        let c = (limit - start.clone()).bin(BinOp::Div, delta.clone()).un(UnOp::Ceil).max(zero);
        c.cmp(CmpOp::Eq, Expr::float(calc, len as f64))
    } else {
        let span = limit - start.clone();
        let pos = delta.clone().cmp(CmpOp::Gt, Expr::idx(0));
        let up = span.clone().cmp(CmpOp::Gt, Expr::idx(0)).select((span.clone() + delta.clone() - 1i64) / delta.clone().max(Expr::idx(1)), Expr::idx(0));
        // Divisors stay positive, so no division can overflow.
        let back = Expr::idx(0) - delta.clone();
        let down = span.clone().cmp(CmpOp::Lt, Expr::idx(0)).select((Expr::idx(0) - span + back.clone() - 1i64) / back.max(Expr::idx(1)), Expr::idx(0));
        pos.select(up, down).cmp(CmpOp::Eq, Expr::idx(len))
    };
    b.check(cx, n, count, "range bounds do not match the output size")?;
    let step = if calc == ScalarType::F64 { b.bind(calc, start.clone().bin(BinOp::Add, delta).bin(BinOp::Sub, start.clone())) } else { delta };
    b.nest(&[y.numel()], |_, i| {
        let v = if calc == ScalarType::F64 {
            start.bin(BinOp::Add, i[0].clone().cast(ScalarType::F64).bin(BinOp::Mul, step))
        } else {
            start + i[0].clone() * step
        };
        vec![store(&y, i[0].clone(), convert(v, calc, ty))]
    });
    b.push(cx);
    Ok(())
}

fn eye_like(cx: &mut Lowerer<'_>, n: NodeId, k: i64) -> Result<(), LowerError> {
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let [_, cols] = y.dims[..] else {
        return Err(cx.unsupported(n, "invalid model: EyeLike takes a 2-D input"));
    };
    let ty = y.ty();
    let mut b = Body::new(cx, n);
    b.nest(&y.dims, |_, o| {
        let on = (o[1].clone() - o[0].clone()).cmp(CmpOp::Eq, Expr::idx(k));
        vec![store(&y, o[0].clone() * cols as i64 + o[1].clone(), on.select(Expr::int(ty, 1), Expr::int(ty, 0)))]
    });
    b.push(cx);
    Ok(())
}

fn shape(cx: &mut Lowerer<'_>, n: NodeId, start: i64, end: Option<i64>) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let r = x.rank() as i64;
    let norm = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let (s, e) = (norm(start), norm(end.unwrap_or(r)));
    let dims: Vec<i64> = x.dims[s..e.max(s)].iter().map(|&d| d as i64).collect();
    constants(cx, n, &dims)
}

/// Stores `values` into output 0 (an `i64` tensor with as many elements).
fn constants(cx: &mut Lowerer<'_>, n: NodeId, values: &[i64]) -> Result<(), LowerError> {
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    if y.numel() != values.len() as u64 {
        return Err(cx.unsupported(n, "invalid model: output size"));
    }
    let ty = y.ty();
    let mut b = Body::new(cx, n);
    b.stmts = values.iter().enumerate().map(|(i, &v)| store(&y, Expr::idx(i as i64), Expr::int(ty, v))).collect();
    b.push(cx);
    Ok(())
}
