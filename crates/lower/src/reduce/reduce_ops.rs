//! ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum,
//! ReduceLogSumExp and ReduceSumSquare.
//!
//! One kernel: outer loops over the kept axes, an accumulator over the reduced ones. An empty
//! reduction leaves the accumulator at its identity, which gives ONNX's values for empty sets
//! (sum 0, product 1, max −∞, min +∞, log-sum −∞, mean NaN). With `noop_with_empty_axes` and no
//! axes, nothing is reduced but the element transform still applies, as in ONNX's reference
//! (ReduceSumSquare squares, ReduceL2 takes |x|).

use kiln_tir::{NodeId, Op};

use super::{axis, bind, const_ints, expect_len, fold, fold_sum, highest, lowest, Split};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduction {
    Sum,
    SumSquare,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
}

/// Lowers `n` if it is a Reduce* op.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let (red, noop) = match &cx.node(n).op {
        Op::ReduceSum(a) => (Reduction::Sum, a.noop_with_empty_axes),
        Op::ReduceSumSquare(a) => (Reduction::SumSquare, a.noop_with_empty_axes),
        Op::ReduceMean(a) => (Reduction::Mean, a.noop_with_empty_axes),
        Op::ReduceMax(a) => (Reduction::Max, a.noop_with_empty_axes),
        Op::ReduceMin(a) => (Reduction::Min, a.noop_with_empty_axes),
        Op::ReduceProd(a) => (Reduction::Prod, a.noop_with_empty_axes),
        Op::ReduceL1(a) => (Reduction::L1, a.noop_with_empty_axes),
        Op::ReduceL2(a) => (Reduction::L2, a.noop_with_empty_axes),
        Op::ReduceLogSum(a) => (Reduction::LogSum, a.noop_with_empty_axes),
        Op::ReduceLogSumExp(a) => (Reduction::LogSumExp, a.noop_with_empty_axes),
        _ => return Ok(false),
    };
    let x = cx.required(n, 0)?;
    let rank = x.rank();
    let list = const_ints(cx, n, 1, "axes")?.unwrap_or_default();
    let mut inner = vec![list.is_empty() && noop == 0; rank];
    for &a in &list {
        inner[axis(cx, n, a, rank)?] = true;
    }
    let split = Split::new(&x.dims, inner);
    let t = x.ty();
    match red {
        Reduction::Max | Reduction::Min => {}
        _ if t == ScalarType::Bool => return Err(cx.unsupported(n, "bool input")),
        Reduction::LogSum | Reduction::LogSumExp if !t.is_float() => return Err(cx.unsupported(n, format!("{} input", t.name()))),
        Reduction::Mean if !t.is_float() && split.inner_count() == 0 => return Err(cx.unsupported(n, "integer mean of an empty set")),
        _ => {}
    }
    // keepdims changes the output's shape, not its element order.
    let y = cx.required_output(n, 0)?;
    expect_len(cx, n, &y, split.outer_count())?;
    if y.ty() != t {
        return Err(cx.unsupported(n, "output type differs from the input's"));
    }

    let mut k = cx.kernel(n);
    let count = split.inner_count();
    let body = k.nest(&split.outer_dims(), |k, o| {
        let mut s = Vec::new();
        let xi = |full: &[Expr]| Expr::load(x.buf, split.flat(full));
        let value = match red {
            Reduction::Sum | Reduction::Mean => {
                let (st, acc) = fold_sum(k, &split, o, t, xi);
                s.extend(st);
                match red {
                    Reduction::Mean if t.is_float() => acc / Expr::float(t, count as f64),
                    Reduction::Mean => acc / Expr::int(t, count as i64),
                    _ => acc,
                }
            }
            Reduction::SumSquare | Reduction::L2 => {
                let (st, acc) = fold_sum(k, &split, o, t, |f| xi(f) * xi(f));
                s.extend(st);
                match red {
                    Reduction::L2 if t.is_float() => acc.un(UnOp::Sqrt),
                    // numpy takes the square root in f64 and truncates back.
                    Reduction::L2 => acc.cast(ScalarType::F64).un(UnOp::Sqrt).cast(t),
                    _ => acc,
                }
            }
            Reduction::L1 => {
                let (st, acc) = fold_sum(k, &split, o, t, |f| xi(f).un(UnOp::Abs));
                s.extend(st);
                acc
            }
            Reduction::Prod => {
                let (st, acc) = fold(k, &split, o, t, Expr::int(t, 1), |acc, f| acc * xi(f));
                s.extend(st);
                acc
            }
            Reduction::Max => {
                let (st, acc) = fold(k, &split, o, t, lowest(t), |acc, f| acc.max(xi(f)));
                s.extend(st);
                acc
            }
            Reduction::Min => {
                let (st, acc) = fold(k, &split, o, t, highest(t), |acc, f| acc.min(xi(f)));
                s.extend(st);
                acc
            }
            Reduction::LogSum => {
                let (st, acc) = fold_sum(k, &split, o, t, xi);
                s.extend(st);
                acc.math(MathFn::Log)
            }
            Reduction::LogSumExp => {
                // Shift by the largest finite element (0 if there is none) so exp cannot
                // overflow: log Σ exp(x) = m + log Σ exp(x − m).
                let inf = Expr::float(t, f64::INFINITY);
                let (st, m) = fold(k, &split, o, t, lowest(t), |acc, f| {
                    let v = xi(f);
                    acc.max(v.clone().un(UnOp::Abs).cmp(CmpOp::Lt, inf).select(v, lowest(t)))
                });
                s.extend(st);
                let shift = bind(k, &mut s, t, m.clone().cmp(CmpOp::Eq, lowest(t)).select(Expr::float(t, 0.0), m));
                let (st, acc) = fold_sum(k, &split, o, t, |f| (xi(f) - shift.clone()).math(MathFn::Exp));
                s.extend(st);
                acc.math(MathFn::Log) + shift
            }
        };
        s.push(Stmt::Store { buf: y.buf, index: split.outer_index(o), value });
        s
    });
    k.body = body;
    cx.push(k);
    Ok(true)
}
