//! Row-wise routines as loops: softmax and layer (or RMS) normalization.

use kiln_loops::call::{LayerNorm, Softmax};
use kiln_loops::ir::*;

use super::{at, bind, int, local, put, size};

pub(super) fn softmax(k: &mut Kernel, c: &Softmax) -> Result<Vec<Stmt>, String> {
    let (rows, cols) = (size(&c.rows, "rows")?, size(&c.cols, "cols")?);
    let x = |r: &Expr, col: &Expr| r.clone() * cols as i64 + col.clone();
    Ok(k.nest(&[rows], |k, r| {
        let r = &r[0];
        let (init_max, max) = local(k, ScalarType::F32, Expr::f32(f32::NEG_INFINITY));
        let find = k.nest(&[cols], |_, col| vec![Stmt::Assign(max, Expr::Var(max).max(at(&c.x, x(r, &col[0]))))]);
        // A row of −∞ subtracts 0, so it gives NaN (0/0) rather than a sum of e^NaN.
        let is_inf = Expr::Var(max).cmp(CmpOp::Eq, Expr::f32(f32::NEG_INFINITY));
        let (lm, m) = bind(k, ScalarType::F32, is_inf.select(Expr::f32(0.0), Expr::Var(max)));
        let (init_sum, sum) = local(k, ScalarType::F32, Expr::f32(0.0));
        let exps = k.nest(&[cols], |k, col| {
            let (le, e) = bind(k, ScalarType::F32, (at(&c.x, x(r, &col[0])) - m.clone()).math(MathFn::Exp));
            vec![le, put(&c.x, x(r, &col[0]), e.clone()), Stmt::Assign(sum, Expr::Var(sum) + e)]
        });
        let zero = Expr::Var(sum).cmp(CmpOp::Eq, Expr::f32(0.0));
        let (ld, d) = bind(k, ScalarType::F32, zero.select(Expr::f32(1.0), Expr::Var(sum)));
        let divide = k.nest(&[cols], |_, col| vec![put(&c.x, x(r, &col[0]), at(&c.x, x(r, &col[0])) / d.clone())]);
        let mut stmts = vec![init_max];
        stmts.extend(find);
        stmts.extend([lm, init_sum]);
        stmts.extend(exps);
        stmts.push(ld);
        stmts.extend(divide);
        stmts
    }))
}

pub(super) fn layernorm(k: &mut Kernel, c: &LayerNorm) -> Result<Vec<Stmt>, String> {
    let (rows, cols) = (size(&c.rows, "rows")?, size(&c.cols, "cols")?);
    let (bias, rms) = (int(&c.bias, "bias")? != 0, int(&c.rms, "rms")? != 0);
    let n = Expr::f32(cols as f32);
    let at_rc = |r: &Expr, col: &Expr| r.clone() * cols as i64 + col.clone();
    Ok(k.nest(&[rows], |k, r| {
        let r = &r[0];
        let mut stmts = Vec::new();
        // The centre (the mean, or 0 for RMS) and 1/√(mean square about it + ε).
        let centre = if rms {
            None
        } else {
            let (init, sum) = local(k, ScalarType::F32, Expr::f32(0.0));
            stmts.push(init);
            stmts.extend(k.nest(&[cols], |_, col| vec![Stmt::Assign(sum, Expr::Var(sum) + at(&c.x, at_rc(r, &col[0])))]));
            let (lm, m) = bind(k, ScalarType::F32, Expr::Var(sum) / n.clone());
            stmts.push(lm);
            Some(m)
        };
        let centred = |col: &Expr| match &centre {
            Some(m) => at(&c.x, at_rc(r, col)) - m.clone(),
            None => at(&c.x, at_rc(r, col)),
        };
        let (init, squares) = local(k, ScalarType::F32, Expr::f32(0.0));
        stmts.push(init);
        stmts.extend(k.nest(&[cols], |k, col| {
            let (ld, d) = bind(k, ScalarType::F32, centred(&col[0]));
            vec![ld, Stmt::Assign(squares, Expr::Var(squares) + d.clone() * d)]
        }));
        let (li, inv) = bind(k, ScalarType::F32, Expr::f32(1.0) / (Expr::Var(squares) / n.clone() + c.epsilon.clone()).un(UnOp::Sqrt));
        stmts.push(li);
        stmts.extend(k.nest(&[cols], |_, col| {
            let col = &col[0];
            let mut y = (centred(col) * inv.clone()) * at(&c.scale, col.clone());
            if bias && !rms {
                y = y + at(&c.b, col.clone());
            }
            vec![put(&c.y, at_rc(r, col), y)]
        }));
        stmts
    }))
}
