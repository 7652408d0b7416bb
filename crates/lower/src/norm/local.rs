//! LpNormalization (along one axis) and LRN (across a window of neighbouring channels).

use kiln_tir::{NodeId, Op};

use super::{expect_dims, expect_float};
use kiln_loops::builder::linear;
use kiln_loops::ir::*;
use crate::reduce::{and, axis, bind, convert, fold, load_as, Split};
use crate::{LowerError, Lowerer};

/// Lowers `n` if it is LpNormalization or LRN.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::LpNormalization(a) => {
            let (ax, p) = (a.axis, a.p);
            lp(cx, n, ax, p)?;
        }
        Op::LRN(a) => {
            let a = a.clone();
            lrn(cx, n, &a)?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// `x / ‖x‖_p` along `axis` (p = 1 or 2); a zero norm gives 0.
fn lp(cx: &mut Lowerer<'_>, n: NodeId, ax: i64, p: i64) -> Result<(), LowerError> {
    if p != 1 && p != 2 {
        return Err(cx.unsupported(n, format!("p = {p}")));
    }
    let x = cx.required(n, 0)?;
    expect_float(cx, n, &x)?;
    let a = axis(cx, n, ax, x.rank())?;
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &x.dims)?;
    // Half-precision values load as f32, so `ct` is f32 or f64.
    let ct = x.ty();
    let split = Split::along(&x.dims, a);
    let mut k = cx.kernel(n);
    let body = k.nest(&split.outer_dims(), |k, o| {
        let (mut s, acc) = fold(k, &split, o, ct, Expr::float(ct, 0.0), |acc, f| {
            let v = load_as(&x, split.flat(f), ct);
            if p == 1 { acc + v.un(UnOp::Abs) } else { acc + v.clone() * v }
        });
        let norm = bind(k, &mut s, ct, if p == 1 { acc } else { acc.un(UnOp::Sqrt) });
        s.extend(k.nest(&split.inner_dims(), |_, j| {
            let at = split.index(o, j);
            let zero = norm.clone().cmp(CmpOp::Eq, Expr::float(ct, 0.0));
            let v = zero.select(Expr::float(ct, 0.0), load_as(&x, at.clone(), ct) / norm);
            vec![Stmt::Store { buf: y.buf, index: at, value: convert(v, ct, y.ty()) }]
        }));
        s
    });
    k.body = body;
    cx.push(k);
    Ok(())
}

/// `x / (bias + alpha/size · Σ x²)^beta`, the sum over channels `c − ⌊(size−1)/2⌋ ..= c +
/// ⌈(size−1)/2⌉` that exist.
fn lrn(cx: &mut Lowerer<'_>, n: NodeId, attr: &kiln_tir::op::LRN) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    expect_float(cx, n, &x)?;
    if x.rank() < 2 || attr.size < 1 {
        return Err(cx.unsupported(n, "input of rank < 2 or size < 1"));
    }
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &x.dims)?;
    // Half-precision values load as f32, so `ct` is f32 or f64.
    let ct = x.ty();
    let size = attr.size;
    let (channels, before) = (x.dims[1] as i64, (size - 1) / 2);
    let st = x.strides();
    let mut k = cx.kernel(n);
    let body = k.nest(&x.dims, |k, idx| {
        let mut s = Vec::new();
        let acc = k.var(ct);
        s.push(Stmt::Local(acc, Expr::float(ct, 0.0)));
        s.extend(k.nest(&[size as u64], |k, w| {
            let mut b = Vec::new();
            let ch = bind(k, &mut b, ScalarType::I64, idx[1].clone() + w[0].clone() - before);
            let mut at = idx.to_vec();
            at[1] = ch.clone();
            let v = load_as(&x, linear(&at, &st), ct);
            let inside = and(ch.clone().cmp(CmpOp::Ge, Expr::idx(0)), ch.cmp(CmpOp::Lt, Expr::idx(channels)));
            b.push(Stmt::If { cond: inside, then: vec![Stmt::Assign(acc, Expr::Var(acc) + v.clone() * v)], otherwise: Vec::new() });
            b
        }));
        let at = linear(idx, &st);
        let coef = Expr::float(ct, f64::from(attr.alpha) / size as f64);
        let base = Expr::float(ct, f64::from(attr.bias)) + coef * Expr::Var(acc);
        let den = Expr::Math(MathFn::Pow, vec![base, Expr::float(ct, f64::from(attr.beta))]);
        s.push(Stmt::Store { buf: y.buf, index: at.clone(), value: convert(load_as(&x, at, ct) / den, ct, y.ty()) });
        s
    });
    k.body = body;
    cx.push(k);
    Ok(())
}
