//! ArgMax and ArgMin: the i64 index of the first (or, with `select_last_index`, the last)
//! extreme element along an axis. NaN counts as the extreme, as in numpy: the first NaN wins
//! (the last with `select_last_index`).

use kiln_tir::{NodeId, Op};

use super::{and, axis, bind, expect_len, is_nan, not, or, Split};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Which extreme an op looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Extreme {
    /// The greatest element.
    Max,
    /// The least element.
    Min,
}

/// Which of several equal extremes wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tie {
    /// The one with the lowest index.
    First,
    /// The one with the highest index.
    Last,
}

/// Lowers `n` if it is ArgMax or ArgMin.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let (extreme, ax, last) = match &cx.node(n).op {
        Op::ArgMax(a) => (Extreme::Max, a.axis, a.select_last_index),
        Op::ArgMin(a) => (Extreme::Min, a.axis, a.select_last_index),
        _ => return Ok(false),
    };
    let tie = if last != 0 { Tie::Last } else { Tie::First };
    let x = cx.required(n, 0)?;
    let a = axis(cx, n, ax, x.rank())?;
    if x.dims[a] == 0 {
        return Err(cx.unsupported(n, "the axis is empty"));
    }
    let split = Split::along(&x.dims, a);
    let y = cx.required_output(n, 0)?;
    expect_len(cx, n, &y, split.outer_count())?;
    if y.ty() != ScalarType::I64 {
        return Err(cx.unsupported(n, "output is not i64"));
    }
    let mut k = cx.kernel(n);
    let body = k.nest(&split.outer_dims(), |k, o| {
        let (mut s, best) = arg_extreme(k, &x, &split, o, extreme, tie);
        s.push(Stmt::Store { buf: y.buf, index: split.outer_index(o), value: best });
        s
    });
    k.body = body;
    cx.push(k);
    Ok(true)
}

/// Statements finding the index (an `i64` expression, valid after them) of the extreme
/// element of `x` along the single inner axis of `split`, at outer index `o`. The axis must
/// not be empty.
pub(super) fn arg_extreme(k: &mut Kernel, x: &crate::Operand, split: &Split, o: &[Expr], extreme: Extreme, tie: Tie) -> (Vec<Stmt>, Expr) {
    let t = x.ty();
    let best = k.var(t);
    let at = k.var(ScalarType::I64);
    let mut s = vec![Stmt::Local(best, Expr::load(x.buf, split.index(o, &[Expr::idx(0)]))), Stmt::Local(at, Expr::idx(0))];
    let n = split.inner_dims()[0];
    s.extend(k.nest(&[n - 1], |k, j| {
        let j = j[0].clone() + 1;
        let mut b = Vec::new();
        let v = bind(k, &mut b, t, Expr::load(x.buf, split.index(o, std::slice::from_ref(&j))));
        let op = match (extreme, tie) {
            (Extreme::Max, Tie::First) => CmpOp::Gt,
            (Extreme::Max, Tie::Last) => CmpOp::Ge,
            (Extreme::Min, Tie::First) => CmpOp::Lt,
            (Extreme::Min, Tie::Last) => CmpOp::Le,
        };
        let beats = v.clone().cmp(op, Expr::Var(best));
        let cond = if t.is_float() {
            let (v_nan, best_nan) = (is_nan(v.clone(), t), is_nan(Expr::Var(best), t));
            match tie {
                Tie::First => and(not(best_nan), or(v_nan, beats)),
                Tie::Last => or(v_nan, and(not(best_nan), beats)),
            }
        } else {
            beats
        };
        b.push(Stmt::If { cond, then: vec![Stmt::Assign(best, v), Stmt::Assign(at, j)], otherwise: Vec::new() });
        b
    }));
    (s, Expr::Var(at))
}
