//! TopK: the `k` largest (or smallest) elements along an axis, in order, with their i64
//! indices.
//!
//! An `f32` TopK with both outputs becomes the runtime's `topk` call; the others, and the call
//! on a target without the runtime, select in loops in O(n·k): round `r` scans the axis for
//! the best element that comes after round `r − 1`'s pick in the output order. The order is
//! ONNX's reference order: by value (NaN above every number), ties by lower index first.
//! `sorted = 0` leaves the order unspecified, so the sorted order serves it too.

use kiln_tir::{NodeId, Op};

use super::{and, axis, bind, const_ints, is_nan, not, or};
use kiln_loops::call::{self, Addr};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Which end of the order TopK takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Largest,
    Smallest,
}

/// Lowers `n` if it is TopK.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let (ax, end) = match &cx.node(n).op {
        Op::TopK(a) => (a.axis, if a.largest != 0 { End::Largest } else { End::Smallest }),
        _ => return Ok(false),
    };
    let x = cx.required(n, 0)?;
    let a = axis(cx, n, ax, x.rank())?;
    let kk = match const_ints(cx, n, 1, "k")?.as_deref() {
        Some(&[kk]) => kk,
        _ => return Err(cx.unsupported(n, "k is not a single constant")),
    };
    let len = x.dims[a];
    if kk < 0 || kk as u64 > len {
        return Err(cx.unsupported(n, format!("k = {kk} is out of range for an axis of {len}")));
    }
    let kk = kk as u64;
    let mut out_dims = x.dims.clone();
    out_dims[a] = kk;
    let values = cx.output(n, 0)?;
    let indices = cx.output(n, 1)?;
    for o in values.iter().chain(&indices) {
        if o.dims != out_dims {
            return Err(cx.unsupported(n, "output shape differs from the inferred one"));
        }
    }
    if values.as_ref().is_some_and(|v| v.ty() != x.ty()) || indices.as_ref().is_some_and(|i| i.ty() != ScalarType::I64) {
        return Err(cx.unsupported(n, "unexpected output types"));
    }
    let t = x.ty();
    let outer: u64 = x.dims[..a].iter().product();
    let inner: u64 = x.dims[a + 1..].iter().product();
    let mut k = cx.kernel(n);
    k.body = match (&values, &indices) {
        // The runtime's selection (`kiln_runtime::topk`): O(len + k·log k) per run.
        (Some(v), Some(i)) if t == ScalarType::F32 => {
            let size = |s: u64| Expr::idx(s as i64);
            let call = call::TopK {
                x: Addr::at(x.buf, 0),
                y: Addr::at(v.buf, 0),
                indices: Addr::at(i.buf, 0),
                outer: size(outer),
                len: size(len),
                inner: size(inner),
                k: size(kk),
                largest: Expr::idx(i64::from(end == End::Largest)),
            };
            vec![Stmt::Call(call.into())]
        }
        _ => {
            let (v, i) = (values.as_ref().map(|v| Addr::at(v.buf, 0)), indices.as_ref().map(|i| Addr::at(i.buf, 0)));
            let shape = Shape { outer, len, inner, k: kk, end, t };
            selection(&mut k, &Addr::at(x.buf, 0), v.as_ref(), i.as_ref(), shape)
        }
    };
    cx.push(k);
    Ok(true)
}

/// A TopK's sizes over `outer × len × inner` elements of type `t`.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub outer: u64,
    pub len: u64,
    pub inner: u64,
    pub k: u64,
    pub end: End,
    pub t: ScalarType,
}

/// Selection round by round, O(len·k): round `r` scans the run for the best element that
/// comes after round `r − 1`'s pick in the output order, storing it to `y` and its index to
/// `indices` (each when given), both laid out `outer × k × inner`.
pub(crate) fn selection(kernel: &mut Kernel, x: &Addr, y: Option<&Addr>, indices: Option<&Addr>, s: Shape) -> Vec<Stmt> {
    let Shape { len, inner, k: kk, end, t, .. } = s;
    let inner_i = inner as i64;
    // `a` strictly before `b` in the output order, by value alone.
    let ahead = move |a: Expr, b: Expr| -> Expr {
        let (hi, lo) = match end {
            End::Largest => (a, b),
            End::Smallest => (b, a),
        };
        let gt = hi.clone().cmp(CmpOp::Gt, lo.clone());
        if t.is_float() { or(gt, and(is_nan(hi, t), not(is_nan(lo, t)))) } else { gt }
    };
    let same = move |a: Expr, b: Expr| -> Expr {
        let eq = a.clone().cmp(CmpOp::Eq, b.clone());
        if t.is_float() { or(eq, and(is_nan(a, t), is_nan(b, t))) } else { eq }
    };
    kernel.nest(&[s.outer, inner], |k, oi| {
        let (o, i) = (&oi[0], &oi[1]);
        // The previous round's pick; `prev_at < 0` before the first round.
        let prev = k.var(t);
        let prev_at = k.var(ScalarType::I64);
        let mut body = vec![Stmt::Local(prev, Expr::int(t, 0)), Stmt::Local(prev_at, Expr::idx(-1))];
        body.extend(k.nest(&[kk], |k, r| {
            let found = k.var(ScalarType::Bool);
            let best = k.var(t);
            let at = k.var(ScalarType::I64);
            let mut round = vec![Stmt::Local(found, Expr::Const(Scalar::Bool(false))), Stmt::Local(best, Expr::int(t, 0)), Stmt::Local(at, Expr::idx(0))];
            round.extend(k.nest(&[len], |k, j| {
                let j = &j[0];
                let mut b = Vec::new();
                let src = x.index.clone() + (o.clone() * len as i64 + j.clone()) * inner_i + i.clone();
                let v = bind(k, &mut b, t, Expr::load(x.buf, src));
                let after_prev = or(
                    Expr::Var(prev_at).cmp(CmpOp::Lt, Expr::idx(0)),
                    or(ahead(Expr::Var(prev), v.clone()), and(same(v.clone(), Expr::Var(prev)), j.clone().cmp(CmpOp::Gt, Expr::Var(prev_at)))),
                );
                // Elements come in index order, so a tie keeps the earlier one.
                let better = or(not(Expr::Var(found)), ahead(v.clone(), Expr::Var(best)));
                b.push(Stmt::If {
                    cond: and(after_prev, better),
                    then: vec![Stmt::Assign(found, Expr::Const(Scalar::Bool(true))), Stmt::Assign(best, v), Stmt::Assign(at, j.clone())],
                    otherwise: Vec::new(),
                });
                b
            }));
            let dst = (o.clone() * kk as i64 + r[0].clone()) * inner_i + i.clone();
            if let Some(y) = y {
                round.push(Stmt::Store { buf: y.buf, index: y.index.clone() + dst.clone(), value: Expr::Var(best) });
            }
            if let Some(ix) = indices {
                round.push(Stmt::Store { buf: ix.buf, index: ix.index.clone() + dst, value: Expr::Var(at) });
            }
            round.push(Stmt::Assign(prev, Expr::Var(best)));
            round.push(Stmt::Assign(prev_at, Expr::Var(at)));
            round
        }));
        body
    })
}
