//! Det: the determinant of every trailing `M×M` matrix.
//!
//! Each matrix is copied into an `f64` scratch buffer and reduced by Gaussian elimination
//! with partial pivoting (as LAPACK's `getrf`, which numpy uses): the determinant is the
//! product of the pivots, negated once per row swap. A zero pivot makes the determinant 0
//! and skips that column's elimination, so nothing divides by zero.

use kiln_tir::NodeId;

use super::{bind, expect_dims, float_type, load_as, local, store, when, Body};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

const F64: ScalarType = ScalarType::F64;

/// Lowers Det.
pub(super) fn det(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    float_type(cx, n, &x, "input")?;
    let r = x.rank();
    if r < 2 || x.dims[r - 1] != x.dims[r - 2] {
        return Err(cx.unsupported(n, format!("invalid model: input shape {:?} is not a stack of square matrices", x.dims)));
    }
    let m = x.dims[r - 1];
    let batch: u64 = x.dims[..r - 2].iter().product();
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &x.dims[..r - 2])?;
    if batch == 0 {
        return Ok(());
    }
    let name = format!("{}_lu", cx.node(n).name);
    let a = cx.program.add_buffer(Buffer { name, elem: ElemType::Scalar(F64), len: (m * m).max(1), kind: BufferKind::Temp });
    let mi = m as i64;
    let at = |i: Expr, j: Expr| i * mi + j;
    let ld = |i: Expr, j: Expr| Expr::load(a, at(i, j));
    let mut b = Body::new(cx, n);
    let nest = b.k.nest(&[batch], |k, bi| {
        let mut s = k.nest(&[m * m], |_, e| vec![Stmt::Store { buf: a, index: e[0].clone(), value: load_as(&x, bi[0].clone() * (mi * mi) + e[0].clone(), F64) }]);
        let det = local(k, &mut s, F64, Expr::float(F64, 1.0));
        s.extend(k.nest(&[m], |k, col| {
            let kk = col[0].clone();
            let mut s = Vec::new();
            // The row at or below `kk` with the largest magnitude in column `kk`.
            let piv_row = local(k, &mut s, ScalarType::I64, kk.clone());
            let piv_abs = local(k, &mut s, F64, ld(kk.clone(), kk.clone()).un(UnOp::Abs));
            s.extend(k.nest(&[m], |k, row| {
                let i = row[0].clone();
                let mut inner = Vec::new();
                let v = bind(k, &mut inner, F64, ld(i.clone(), kk.clone()).un(UnOp::Abs));
                inner.push(when(v.clone().cmp(CmpOp::Gt, Expr::Var(piv_abs)), vec![Stmt::Assign(piv_row, i.clone()), Stmt::Assign(piv_abs, v)]));
                vec![when(i.cmp(CmpOp::Gt, kk.clone()), inner)]
            }));
            let p = Expr::Var(piv_row);
            let swap = k.nest(&[m], |k, c| {
                let j = c[0].clone();
                let mut s = Vec::new();
                let tmp = bind(k, &mut s, F64, ld(kk.clone(), j.clone()));
                s.push(Stmt::Store { buf: a, index: at(kk.clone(), j.clone()), value: ld(p.clone(), j.clone()) });
                s.push(Stmt::Store { buf: a, index: at(p.clone(), j), value: tmp });
                s
            });
            let mut swap_then = swap;
            swap_then.push(Stmt::Assign(det, Expr::float(F64, 0.0) - Expr::Var(det)));
            s.push(when(p.clone().cmp(CmpOp::Ne, kk.clone()), swap_then));
            let pivot = bind(k, &mut s, F64, ld(kk.clone(), kk.clone()));
            s.push(Stmt::Assign(det, Expr::Var(det) * pivot.clone()));
            let eliminate = k.nest(&[m], |k, row| {
                let i = row[0].clone();
                let mut inner = Vec::new();
                let f = bind(k, &mut inner, F64, ld(i.clone(), kk.clone()) / pivot.clone());
                inner.extend(k.nest(&[m], |_, c| {
                    let j = c[0].clone();
                    let v = ld(i.clone(), j.clone()) - f.clone() * ld(kk.clone(), j.clone());
                    vec![when(j.clone().cmp(CmpOp::Gt, kk.clone()), vec![Stmt::Store { buf: a, index: at(i.clone(), j), value: v }])]
                }));
                vec![when(i.cmp(CmpOp::Gt, kk.clone()), inner)]
            });
            s.push(when(pivot.cmp(CmpOp::Ne, Expr::float(F64, 0.0)), eliminate));
            s
        }));
        s.push(store(&y, bi[0].clone(), Expr::Var(det), F64));
        s
    });
    b.stmts.extend(nest);
    b.push(cx);
    Ok(())
}
