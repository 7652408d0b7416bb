//! CumSum and CumProd: running sums and products along an axis, optionally exclusive (each
//! output leaves out its own element) and reversed.
//!
//! The axis is an input. A constant axis gives one loop nest; an axis computed at run time
//! gives one nest per possible axis, chosen by comparing, after a range check.

use kiln_tir::{NodeId, Op};

use super::{axis, Split};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// Which running combination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Combine {
    Sum,
    Prod,
}

/// Direction and inclusiveness of a scan.
#[derive(Clone, Copy, Debug)]
struct Mode {
    combine: Combine,
    exclusive: bool,
    reverse: bool,
}

/// Lowers `n` if it is CumSum or CumProd.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let mode = match &cx.node(n).op {
        Op::CumSum(a) => Mode { combine: Combine::Sum, exclusive: a.exclusive != 0, reverse: a.reverse != 0 },
        Op::CumProd(a) => Mode { combine: Combine::Prod, exclusive: a.exclusive != 0, reverse: a.reverse != 0 },
        _ => return Ok(false),
    };
    let x = cx.required(n, 0)?;
    let rank = x.rank();
    if rank == 0 {
        return Err(cx.unsupported(n, "rank-0 input"));
    }
    if x.ty() == ScalarType::Bool {
        return Err(cx.unsupported(n, "bool input"));
    }
    let y = cx.required_output(n, 0)?;
    if y.dims != x.dims || y.ty() != x.ty() {
        return Err(cx.unsupported(n, "output type differs from the input's"));
    }
    let ax = cx.required(n, 1)?;
    if ax.numel() != 1 || !matches!(ax.ty(), ScalarType::I32 | ScalarType::I64) {
        return Err(cx.unsupported(n, "axis is not one i32 or i64"));
    }
    let constant = cx.const_input(n, 1).and_then(|t| t.to_i64s()).and_then(|v| v.first().copied());
    let mut k = cx.kernel(n);
    k.body = match constant {
        Some(a) => {
            let a = axis(cx, n, a, rank)?;
            scan(&mut k, &x, &y, a, mode)
        }
        None => {
            let code = cx.error(n, format!("axis is out of range for rank {rank}"));
            let raw = k.var(ScalarType::I64);
            let a = k.var(ScalarType::I64);
            let r = rank as i64;
            let mut body = vec![
                Stmt::Let(raw, Expr::load(ax.buf, Expr::idx(0)).cast(ScalarType::I64)),
                Stmt::Check { cond: super::and(Expr::Var(raw).cmp(CmpOp::Ge, Expr::idx(-r)), Expr::Var(raw).cmp(CmpOp::Lt, Expr::idx(r))), error: code },
                Stmt::Let(a, Expr::Var(raw).cmp(CmpOp::Lt, Expr::idx(0)).select(Expr::Var(raw) + r, Expr::Var(raw))),
            ];
            for i in 0..rank {
                let then = scan(&mut k, &x, &y, i, mode);
                body.push(Stmt::If { cond: Expr::Var(a).cmp(CmpOp::Eq, Expr::idx(i as i64)), then, otherwise: Vec::new() });
            }
            body
        }
    };
    cx.push(k);
    Ok(true)
}

/// The loop nest scanning `x` into `y` along axis `a`.
fn scan(k: &mut Kernel, x: &Operand, y: &Operand, a: usize, mode: Mode) -> Vec<Stmt> {
    let split = Split::along(&x.dims, a);
    let t = x.ty();
    let len = x.dims[a] as i64;
    k.nest(&split.outer_dims(), |k, o| {
        let acc = k.var(t);
        let identity = match mode.combine {
            Combine::Sum => Expr::int(t, 0),
            Combine::Prod => Expr::int(t, 1),
        };
        let mut s = vec![Stmt::Local(acc, identity)];
        s.extend(k.nest(&[len as u64], |_, j| {
            let p = if mode.reverse { Expr::idx(len - 1) - j[0].clone() } else { j[0].clone() };
            let at = split.index(o, &[p]);
            let v = Expr::load(x.buf, at.clone());
            let next = match mode.combine {
                Combine::Sum => Expr::Var(acc) + v,
                Combine::Prod => Expr::Var(acc) * v,
            };
            let update = Stmt::Assign(acc, next);
            let store = Stmt::Store { buf: y.buf, index: at, value: Expr::Var(acc) };
            if mode.exclusive { vec![store, update] } else { vec![update, store] }
        }));
        s
    })
}
