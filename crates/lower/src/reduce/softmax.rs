//! Softmax, LogSoftmax and Hardmax along one axis.
//!
//! Softmax and LogSoftmax subtract the axis maximum before exponentiating, as ONNX's
//! reference does, so large inputs do not overflow. Hardmax marks the first maximum (NaN
//! counting as the maximum, as numpy's argmax has it).

use kiln_tir::{NodeId, Op};

use super::arg::{arg_extreme, Extreme, Tie};
use super::{axis, bind, expect_len, fold, fold_sum, lowest, Split};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Which op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Softmax,
    LogSoftmax,
    Hardmax,
}

/// Lowers `n` if it is Softmax, LogSoftmax or Hardmax.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let (kind, ax) = match &cx.node(n).op {
        Op::Softmax(a) => (Kind::Softmax, a.axis),
        Op::LogSoftmax(a) => (Kind::LogSoftmax, a.axis),
        Op::Hardmax(a) => (Kind::Hardmax, a.axis),
        _ => return Ok(false),
    };
    let x = cx.required(n, 0)?;
    let a = axis(cx, n, ax, x.rank())?;
    let t = x.ty();
    if !t.is_float() {
        return Err(cx.unsupported(n, format!("{} input", t.name())));
    }
    let y = cx.required_output(n, 0)?;
    expect_len(cx, n, &y, x.numel())?;
    let split = Split::along(&x.dims, a);
    let mut k = cx.kernel(n);
    let body = if kind == Kind::Hardmax {
        if x.dims[a] == 0 {
            // Nothing to mark; the output is empty too.
            Vec::new()
        } else {
            k.nest(&split.outer_dims(), |k, o| {
                let (mut s, at) = arg_extreme(k, &x, &split, o, Extreme::Max, Tie::First);
                let at = bind(k, &mut s, ScalarType::I64, at);
                s.extend(k.nest(&split.inner_dims(), |_, j| {
                    let one = j[0].clone().cmp(CmpOp::Eq, at.clone());
                    vec![Stmt::Store { buf: y.buf, index: split.index(o, j), value: one.select(Expr::float(y.ty(), 1.0), Expr::float(y.ty(), 0.0)) }]
                }));
                s
            })
        }
    } else {
        // Half-precision values load as f32, so arithmetic is in `t` (f32 or f64) throughout.
        let xi = |full: &[Expr]| Expr::load(x.buf, split.flat(full));
        k.nest(&split.outer_dims(), |k, o| {
            let mut s = Vec::new();
            let (st, m) = fold(k, &split, o, t, lowest(t), |acc, f| acc.max(xi(f)));
            s.extend(st);
            let m = bind(k, &mut s, t, m);
            let (st, sum) = fold_sum(k, &split, o, t, |f| (xi(f) - m.clone()).math(MathFn::Exp));
            s.extend(st);
            let sum = bind(k, &mut s, t, sum);
            let log_sum = if kind == Kind::LogSoftmax { Some(bind(k, &mut s, t, sum.clone().math(MathFn::Log))) } else { None };
            s.extend(k.nest(&split.inner_dims(), |_, j| {
                let shifted = xi(&split.full(o, j)) - m.clone();
                let value = match &log_sum {
                    Some(l) => shifted - l.clone(),
                    None => shifted.math(MathFn::Exp) / sum.clone(),
                };
                vec![Stmt::Store { buf: y.buf, index: split.index(o, j), value }]
            }));
            s
        })
    };
    k.body = body;
    cx.push(k);
    Ok(true)
}
